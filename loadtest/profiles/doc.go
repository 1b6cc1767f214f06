// Package profiles holds the load test's built-in workloads: Kueue's
// scheduler performance generator files (test/performance/scheduler/configs
// in Kueue's repository), in Kueue's own format, which loadtest/baseline
// reads. Any other file of that format can be given by path instead.
package profiles

import "embed"

// Files are the built-in profiles, by file name: baseline.yaml,
// large-scale.yaml and tas.yaml.
//
//go:embed *.yaml
var Files embed.FS
