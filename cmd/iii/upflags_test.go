package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/iii-on-nats/iii/cluster/membership"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/traces"
)

// runIIIWithin runs the iii command tree with args until it returns or d
// passes (then its context ends, and a node it started stops).
func runIIIWithin(t *testing.T, d time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := newRootCmd()
	out := &enginetest.Buffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// authServer is a nats-server that takes user "iii" with password
// "s3cret" only.
func authServer(t *testing.T) *server.Server {
	return enginetest.RunServer(t, func(o *server.Options) { o.Username, o.Password = "iii", "s3cret" })
}

// `iii up --join` and `iii worker run` print the URL they use without its
// password: it went to stdout whole, in the "nats:" and "connect:" lines.
func TestUpHidesJoinCredentials(t *testing.T) {
	ns := authServer(t)
	url := strings.Replace(ns.ClientURL(), "nats://", "nats://iii:s3cret@", 1)
	for _, c := range []struct {
		name string
		args []string
		up   string // what the command prints once it runs
	}{
		{"up --join", []string{"up", "--join", url, "--home", t.TempDir(), "--http", "", "--workers", "traces"}, "Ctrl-C to stop"},
		{"worker run", []string{"worker", "run", "provider-scripted", "--nats", url, "--home", t.TempDir()}, "Ctrl-C to stop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cmd := newRootCmd()
			out := &enginetest.Buffer{}
			cmd.SetOut(out)
			cmd.SetErr(out)
			cmd.SetArgs(append(c.args, "--log-level", "error"))
			done := make(chan error, 1)
			go func() { done <- cmd.ExecuteContext(ctx) }()
			enginetest.Eventually(t, 30*time.Second, func() error {
				select {
				case err := <-done:
					done <- err
					return nil
				default:
				}
				if !strings.Contains(out.String(), c.up) {
					return fmt.Errorf("not up yet:\n%s", out)
				}
				return nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			if strings.Contains(out.String(), "s3cret") {
				t.Fatalf("the password is printed:\n%s", out)
			}
			if !strings.Contains(out.String(), "iii:"+redacted+"@") {
				t.Fatalf("the URL is not shown, redacted:\n%s", out)
			}
		})
	}
}

// Flags `iii up` would accept and ignore are refused, naming them: the
// client commands' --nats, the embedded server's settings with --join
// (on the command line or in --config), --creds without --join.
func TestUpRefusesIgnoredFlags(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	join := ns.ClientURL()
	file := writeTemp(t, "join: "+join+"\nlisten: 127.0.0.1:0\nmonitor_port: 8222\n")
	// Keys of the embedded server that have no flag.
	fileNoFlag := writeTemp(t, "join: "+join+"\ncluster: {pool_size: 2}\nleafnodes: {advertise: 'edge:7422', users: [{user: a, password: b}]}\nleaf: {user: u, password: p}\n")
	creds := writeTemp(t, "x")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"nats", []string{"--nats", join, "--listen", "127.0.0.1:0"}, "--nats is for the client commands"},
		{"join listen", []string{"--join", join, "--listen", "127.0.0.1:0"}, "--listen would be ignored"},
		{"join max-payload", []string{"--join", join, "--max-payload", "2097152"}, "--max-payload would be ignored"},
		{"join monitor-port", []string{"--join", join, "--monitor-port", "8222"}, "--monitor-port would be ignored"},
		{"join peer auth", []string{"--join", join, "--cluster-user", "u", "--gateway-password-file", creds}, "--cluster-user, --gateway-password-file would be ignored"},
		{"join several", []string{"--join", join, "--listen", "127.0.0.1:0", "--cluster", "c1"}, "--listen, --cluster would be ignored"},
		{"join config", []string{"--config", file}, "listen (--config), monitor_port (--config) would be ignored"},
		{"join config no flag", []string{"--config", fileNoFlag}, "cluster.pool_size (--config), leafnodes.advertise (--config), leafnodes.users (--config), leaf.user (--config) would be ignored"},
		{"creds without join", []string{"--creds", creds, "--listen", "127.0.0.1:0"}, "--creds needs --join"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"up", "--home", t.TempDir(), "--http", "", "--workers", "traces", "--log-level", "error"}, c.args...)
			// Without the check the node starts and runs until the
			// context ends.
			out, err := runIIIWithin(t, 15*time.Second, args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q\n%s", err, c.want, out)
			}
		})
	}
}

// The client commands' --timeout (and --nats) on a command that makes no
// client call is refused, naming it: `iii up --timeout 5m`, `iii worker
// run --timeout`, `iii bench turns --timeout` (which has --turn-timeout)
// accepted it and changed nothing.
func TestClientFlagsRefusedElsewhere(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"up timeout", []string{"up", "--timeout", "5m", "--home", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--workers", "traces"}, "--timeout is the client commands' call timeout: iii up"},
		{"up join timeout", []string{"up", "--timeout", "5m", "--home", t.TempDir(), "--join", ns.ClientURL(), "--http", "", "--workers", "traces"}, "--timeout is the client commands' call timeout: iii up"},
		{"worker run timeout", []string{"worker", "run", "traces", "--timeout", "5m", "--home", t.TempDir(), "--nats", ns.ClientURL()}, "--timeout is the client commands' call timeout: iii worker run"},
		{"bench timeout", []string{"bench", "turns", "-q", "--sessions", "1", "--turns", "1", "--no-kv", "--no-floor", "--timeout", "5m", "--dir", t.TempDir()}, "--timeout is the client commands' call timeout: iii bench turns"},
		{"bench nats", []string{"bench", "turns", "-q", "--sessions", "1", "--turns", "1", "--no-kv", "--no-floor", "--nats", ns.ClientURL(), "--dir", t.TempDir()}, "--nats is for the client commands"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Without the check the command runs until the context ends,
			// or runs its bench.
			out, err := runIIIWithin(t, 15*time.Second, append(c.args, "--log-level", "error")...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("iii %q: %v, want an error saying %q\n%s", c.args, err, c.want, out)
			}
		})
	}
}

// --cluster-listen and --routes without a cluster name are refused,
// naming the flag missing: they made a node that routed to its peers but
// kept the name "iii" and its session grains to itself.
func TestRoutesNeedClusterName(t *testing.T) {
	t.Parallel()
	port := enginetest.FreePorts(t, 1)[0]
	listen := "127.0.0.1:" + strconv.Itoa(port)
	route := "nats-route://" + listen
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"listen and routes", []string{"--cluster-listen", listen, "--routes", route}, "--cluster-listen, --routes need --cluster NAME"},
		{"routes", []string{"--routes", route}, "--routes needs --cluster NAME"},
		{"config", []string{"--config", writeTemp(t, "cluster:\n  listen: "+listen+"\n  routes: ["+route+"]\n")}, "--cluster-listen, --routes need --cluster NAME"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"up", "--home", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--workers", "traces", "--log-level", "error"}, c.args...)
			out, err := runIIIWithin(t, 15*time.Second, args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q\n%s", err, c.want, out)
			}
		})
	}
}

// `iii up --cluster NAME` on one node is refused at start, saying to list
// the other members or run standalone: with its own route only, the node
// waited 2 minutes for a JetStream meta leader nats-server never elects
// (a meta group needs a second server).
func TestUpClusterOfOneRefused(t *testing.T) {
	t.Parallel()
	listen := "127.0.0.1:" + strconv.Itoa(enginetest.FreePorts(t, 1)[0])
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"own route only", []string{"--cluster", "c1", "--cluster-listen", listen, "--routes", "nats-route://" + listen}, "cluster.routes name only this node"},
		{"no routes", []string{"--cluster", "c1", "--cluster-listen", listen}, "cluster.routes is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"up", "--home", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--workers", "traces", "--log-level", "error"}, c.args...)
			start := time.Now()
			out, err := runIIIWithin(t, 20*time.Second, args...)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "standalone") {
				t.Fatalf("err %v, want %q and the standalone advice\n%s", err, c.want, out)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("refused after %v, want at once", d)
			}
		})
	}
}

// No flag's usage holds a backquote: pflag takes a backquoted word for
// the flag's value name, and `iii up --help` printed
// "--no-traces iii traces" and "--workers iii worker list".
func TestUsageHasNoBackquotes(t *testing.T) {
	t.Parallel()
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				name, _ := pflag.UnquoteUsage(f)
				t.Errorf("%s --%s: usage has a backquote (help shows it as --%s %s): %q", cmd.CommandPath(), f.Name, f.Name, name, f.Usage)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.PersistentFlags().VisitAll(check)
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}

// The member entry of a clustered node without --name names the node: the
// host name its server took, or, with --join, the host's. It was empty,
// and so was `iii cluster members`' NODE column.
func TestMemberNodeName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no host name")
	}
	for _, c := range []struct {
		name string
		topo func() topology
	}{
		// A region alone: the server is named, JetStream stays standalone.
		{"server took the host name", func() topology { return topology{region: "r1"} }},
		{"join", func() topology { return topology{join: enginetest.RunServer(t).ClientURL()} }},
		{"name given", func() topology { return topology{region: "r1", name: "n7"} }},
	} {
		// Not parallel: proto.actor's remote sets grpc's global logger as
		// it starts, a race between two clustered nodes of one process.
		t.Run(c.name, func(t *testing.T) {
			topo := c.topo()
			want := topo.name
			if want == "" {
				want = host
			}
			a := startTestAppWith(t, upConfig{modules: []string{"orchestrator"}, topo: topo})
			if a.node != nil && a.node.Config().Name != want {
				t.Fatalf("server name %q, want %q", a.node.Config().Name, want)
			}
			enginetest.Eventually(t, 10*time.Second, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				list, err := membership.List(ctx, a.e.JetStream(), "iii")
				if err != nil || len(list) == 0 {
					return fmt.Errorf("members: %v %v", list, err)
				}
				for _, m := range list {
					if m.Meta["node"] != want {
						b, _ := json.Marshal(m)
						return fmt.Errorf("member node %q, want %q: %s", m.Meta["node"], want, b)
					}
				}
				return nil
			})
		})
	}
}

// The trace store's stream limits (traces.stream_max_age,
// traces.stream_max_bytes) apply to III_SPANS, which a node's span
// exporter creates before the traces worker starts (they did nothing
// then), and a new value given on a restart updates the stream; a limit
// not given leaves the stream's own (an operator's nats stream edit).
func TestSpanStreamLimits(t *testing.T) {
	t.Parallel()
	const (
		mib = 1 << 20
		day = 24 * time.Hour
	)
	for _, c := range []struct {
		name     string
		existing *jetstream.StreamConfig // III_SPANS before the start (nil: none)
		store    bool                    // the exporter runs (no --no-traces)
		settings map[string]string
		age      time.Duration
		bytes    int64
	}{
		{"created with the settings", nil, true, map[string]string{"stream_max_age": "2h", "stream_max_bytes": "2097152"}, 2 * time.Hour, 2 * mib},
		{"created with the defaults", nil, true, nil, traces.DefaultStreamMaxAge, traces.DefaultStreamMaxBytes},
		{"existing updated", ptr(traces.StreamConfig(1, day, 256*mib)), true, map[string]string{"stream_max_age": "48h", "stream_max_bytes": "4194304"}, 48 * time.Hour, 4 * mib},
		{"existing updated without the exporter", ptr(traces.StreamConfig(1, day, 256*mib)), false, map[string]string{"stream_max_age": "1h"}, time.Hour, 256 * mib},
		{"existing tuned kept", ptr(traces.StreamConfig(1, 72*time.Hour, 256*mib)), true, map[string]string{"stream_max_bytes": "8388608"}, 72 * time.Hour, 8 * mib},
		{"existing kept without settings", ptr(traces.StreamConfig(1, 72*time.Hour, 3*mib)), true, nil, 72 * time.Hour, 3 * mib},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ns := enginetest.RunServer(t)
			nc := enginetest.Connect(t, ns)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			if c.existing != nil {
				if _, err := js.CreateStream(ctx, *c.existing); err != nil {
					t.Fatal(err)
				}
			}
			e, _, flush, err := tracedEngine(ctx, nc, slog.New(slog.DiscardHandler), nil, "test", c.store, map[string]map[string]string{"traces": c.settings})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(ctx); _ = flush(ctx) })
			s, err := js.Stream(ctx, traces.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config; got.MaxAge != c.age || got.MaxBytes != c.bytes {
				t.Fatalf("III_SPANS max age %v, max bytes %d; want %v, %d", got.MaxAge, got.MaxBytes, c.age, c.bytes)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		nc := enginetest.Connect(t, enginetest.RunServer(t))
		for _, s := range []map[string]string{{"stream_max_bytes": "10"}, {"stream_max_age": "soon"}, {"stream_max_age": "-1h"}} {
			_, _, _, err := tracedEngine(context.Background(), nc, slog.New(slog.DiscardHandler), nil, "test", false, map[string]map[string]string{"traces": s})
			if !errors.Is(err, engine.ErrInvalidOption) {
				t.Errorf("%v: err %v, want ErrInvalidOption", s, err)
			}
		}
	})
}

// `iii up --set traces.stream_max_age=...` reaches the stream the node
// creates.
func TestUpSpanStreamLimits(t *testing.T) {
	a := startTestAppWith(t, upConfig{
		modules:  []string{"traces"},
		settings: map[string]map[string]string{"traces": {"stream_max_age": "3h", "stream_max_bytes": "5242880"}},
	})
	s, err := a.e.JetStream().Stream(context.Background(), traces.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config; got.MaxAge != 3*time.Hour || got.MaxBytes != 5<<20 {
		t.Fatalf("III_SPANS max age %v, max bytes %d; want 3h, 5 MiB", got.MaxAge, got.MaxBytes)
	}
}

func ptr[T any](v T) *T { return &v }
