// Package schemas holds the JSON Schema (draft 2020-12) of every Sluice
// event type, one file per CloudEvents type at <type>.json in this
// directory, e.g. dev.sluice.workload.v1.admitted.json. Each file's $id is
// https://sluice.dev/schemas/<type>.json, the value events carry in their
// ce-dataschema header. The files are embedded in FS so tools can validate
// payloads without the source tree.
//
// Schemas only grow: a new optional property is fine, anything else is a
// new v2 type with its own file. A test in package events checks that every
// registered type has a schema here whose properties and required list
// match the Go struct, that an example of each type validates, and that no
// schema exists without a type.
package schemas
