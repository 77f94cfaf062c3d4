package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine/enginetest"
)

// chat starts a node of its own only when no server answers at --nats: a
// server that refused its credentials, a --nats that does not parse and a
// --timeout the engine refuses are said, and exit 1. Each of them started
// a node in --home and chatted there, where nobody else reaches the
// session, and the error was never shown.
func TestChatEmbeddedOnlyWithoutNode(t *testing.T) {
	t.Parallel()
	auth := authServer(t)
	plain := enginetest.RunServer(t)
	for _, tc := range []struct {
		name  string
		args  []string
		want  string // in the error; "" for a chat that starts a node
		embed bool
	}{
		{"nothing listens", []string{"--nats", "nats://127.0.0.1:1"}, "", true},
		{"wrong password", []string{"--nats", strings.Replace(auth.ClientURL(), "nats://", "nats://iii:wrong@", 1)}, "uthorization", false},
		{"no credentials", []string{"--nats", auth.ClientURL()}, "uthorization", false},
		{"bad timeout", []string{"--nats", plain.ClientURL(), "--timeout", "0s"}, "timeout 0s must be positive", false},
		{"url does not parse", []string{"--nats", "nats://iii:s3cret%zz@127.0.0.1:1"}, "does not parse", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := enginetest.NodeHome(t)
			args := append([]string{"chat", "--home", home, "-m", "hi"}, tc.args...)
			out, err := runIIIWithin(t, 90*time.Second, args...)
			started := strings.Contains(out, "(started a node in this process")
			if tc.embed {
				if err != nil || !started || !strings.Contains(out, "hi\n") {
					t.Fatalf("chat with no node: %v, want a node started here and the answer\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || started {
				t.Fatalf("chat %q: %v, want an error saying %q and no node started\n%s", tc.args, err, tc.want, out)
			}
			if _, serr := os.Stat(filepath.Join(home, homeLockFile)); !os.IsNotExist(serr) {
				t.Fatalf("a node ran in --home %s: %v", home, serr)
			}
		})
	}
}
