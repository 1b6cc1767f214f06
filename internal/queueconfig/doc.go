// Package queueconfig checks Sluice's queue configuration objects the way the
// CRD schema does, and turns them into the engine's configuration. The
// simulator uses it on scenario files, which never pass an API server; the
// services use it on what the watcher mirrors.
package queueconfig
