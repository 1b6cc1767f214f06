// Package convert turns Kueue's queue manifests (kueue.x-k8s.io v1beta1 and
// v1beta2) into Sluice's (sluice.dev/v1beta1): the apiVersion, the fields
// Kueue renamed between versions, and nothing that changes meaning. A Kueue
// kind or field Sluice does not implement is an error naming the file,
// document, object and field, or, when asked, dropped with a warning.
// Documents of other API groups pass through as written. It does no I/O:
// text in, text out.
package convert
