// pause: the process that holds a pod sandbox's namespaces, as Kubernetes' own pause does. Static
// (CGO off), so its image is this one file. As PID 1 of the pod it must exit on SIGTERM/SIGINT
// (the kernel ignores signals a PID 1 has no handler for) and reap orphans re-parented to it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
