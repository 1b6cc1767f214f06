// Command pause holds a pod's namespaces for its containers: the sandbox
// image containerd starts first in every pod. It does nothing but wait
// until it is told to stop, and reaps the orphans it inherits as the
// pod's init process.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			// Reap every child that ended; -1: any child, WNOHANG: do
			// not wait for one that still runs.
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
