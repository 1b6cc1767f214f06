// Package engine is Sluice's decision core: quota accounting over the cohort
// tree, flavor assignment, queue ordering, preemption and fair sharing.
//
// It is pure: callers hand it configuration and workloads, it hands back
// decisions. It does no I/O and never reads a clock; every time it needs is
// part of its input. The admission and preemption services and
// `sluice simulate` all drive this same package, so a scenario that behaves
// one way in the simulator behaves the same way in a cluster.
//
// Quantities are int64 in canonical units: milli-units for cpu, base units
// (bytes, devices) for everything else. See Canonical and Format.
package engine
