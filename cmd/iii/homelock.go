//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// homeLockFile is the file in a node's data directory that the node holding
// it locks: nats-server takes no lock on its store directory, and two
// servers writing one store corrupt it (stream files go missing under the
// first server).
const homeLockFile = "iii.lock"

// lockHome locks home for this process, or says which process holds it.
// The kernel drops the lock when the process dies, kill -9 included, so a
// crash never leaves a stale one. The returned func releases it.
func lockHome(home string) (func(), error) {
	path := filepath.Join(home, homeLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", home, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = "process " + strconv.Itoa(pid)
			}
			return nil, fmt.Errorf("data directory %s is in use by %s (an `iii up` or an `iii chat` that started a node): stop it, reach it with --nats, or give this node another --home", home, holder)
		}
		return nil, fmt.Errorf("data directory %s: lock %s: %w", home, path, err)
	}
	// The holder's pid, for the message above; the lock is what counts.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
