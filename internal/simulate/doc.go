// Package simulate runs the admission engine over a scenario in virtual
// time: configuration and workloads from YAML in, one CloudEvent-shaped
// record per workload transition out. Output depends only on input, so the
// same scenario always gives byte-identical output.
package simulate
