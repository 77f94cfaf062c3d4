package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

const (
	routeSecret   = "route-s3cret-Zq9"
	gatewaySecret = "gw-s3cret-Xk4"
)

// secretFile writes pw (with a trailing newline, as editors and
// `kubectl create secret --from-file` leave it) to a 0600 file.
func secretFile(t *testing.T, pw string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// noSecrets fails the test when a log line holds one of the secrets.
func noSecrets(t *testing.T, sink *logSink, secrets ...string) {
	t.Helper()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, l := range sink.lines {
		for _, s := range secrets {
			if strings.Contains(l, s) {
				t.Errorf("a log line holds a password: %s", l)
			}
		}
	}
}

// dumpOnFailure logs what sink collected when the test fails.
func dumpOnFailure(t *testing.T, name string, sink *logSink) {
	t.Cleanup(func() {
		if t.Failed() {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			t.Logf("%s log:\n%s", name, strings.Join(sink.lines, "\n"))
		}
	})
}

// Routes with cluster.authorization: a member with the credentials (from
// a file on one side, inline on the other) forms a JetStream cluster;
// one without them, or with a wrong password, is refused and never
// routes. No password reaches a log, debug lines included.
func TestRouteAuthorization(t *testing.T) {
	t.Parallel()
	ports := enginetest.FreePorts(t, 2)
	routes := []string{fmt.Sprintf("nats-route://127.0.0.1:%d", ports[0]), fmt.Sprintf("nats-route://127.0.0.1:%d", ports[1])}
	sink := &logSink{}
	dumpOnFailure(t, "members", sink)
	member := func(i int, auth cluster.Auth) cluster.Config {
		return cluster.Config{
			Name: fmt.Sprintf("m%d", i+1), Port: -1, StoreDir: t.TempDir(), MaxMemory: 32 << 20, MaxStore: 256 << 20,
			Logger: slog.New(sink), Debug: true,
			Cluster: cluster.ClusterConfig{Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes, Authorization: auth},
		}
	}
	m1 := startNode(t, member(0, cluster.Auth{User: "route", PasswordFile: secretFile(t, routeSecret)}))
	m2 := startNode(t, member(1, cluster.Auth{User: "route", Password: routeSecret}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitAll(t, ctx, m1, m2)

	_, js1 := connect(t, m1)
	_, js2 := connect(t, m2)
	kv, err := js1.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "authed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	kv2, err := js2.KeyValue(ctx, "authed")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv2.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("m2 reads %v, %v", e, err)
	}

	for _, c := range []struct {
		name string
		auth cluster.Auth
	}{
		{"no credentials", cluster.Auth{}},
		{"wrong password", cluster.Auth{User: "route", Password: "guess"}},
		{"wrong user", cluster.Auth{User: "intruder", Password: routeSecret}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			isink := &logSink{}
			dumpOnFailure(t, "intruder", isink)
			// A routing-only server, as an attacker would run: it needs
			// no JetStream to read every bucket once routed.
			in := startNode(t, cluster.Config{
				Name: "intruder-" + strings.ReplaceAll(c.name, " ", "-"), Port: -1, NoJetStream: true, Logger: slog.New(isink),
				Cluster: cluster.ClusterConfig{Listen: "127.0.0.1:0", Routes: routes[:1], Authorization: c.auth},
			})
			// It dials again every second; allow for a loaded machine.
			enginetest.Eventually(t, 10*time.Second, func() error {
				if isink.find("authorization violation") != "" {
					return nil
				}
				return errors.New("no authorization error logged yet")
			})
			if n := in.Server().NumRemotes(); n != 0 {
				t.Fatalf("the intruder has %d routes", n)
			}
			noSecrets(t, isink, routeSecret)
		})
	}
	t.Cleanup(func() {
		// Subtests ran: m1 still routes to m2 alone, and nothing logged
		// a password.
		if n := m1.Server().NumRemotes(); n != 1 {
			t.Errorf("m1 routes to %d servers, want 1 (m2)", n)
		}
		noSecrets(t, sink, routeSecret)
	})
}

// Gateways with gateway.authorization: a region with the credentials
// joins the supercluster, one without them is refused.
func TestGatewayAuthorization(t *testing.T) {
	t.Parallel()
	sink := &logSink{}
	dumpOnFailure(t, "regions", sink)
	auth := cluster.Auth{User: "gw", PasswordFile: secretFile(t, gatewaySecret)}
	region := func(name string, a cluster.Auth, remotes ...cluster.RemoteGateway) cluster.Config {
		return cluster.Config{
			Name: strings.ToLower(name) + "1", Port: -1, StoreDir: t.TempDir(), MaxMemory: 32 << 20, MaxStore: 256 << 20,
			Logger: slog.New(sink), Debug: true, Region: name,
			Gateway: cluster.GatewayConfig{Listen: "127.0.0.1:0", Authorization: a, Gateways: remotes},
		}
	}
	b := startNode(t, region("B", auth))
	toB := cluster.RemoteGateway{Name: "B", URLs: []string{"nats://" + b.GatewayAddr()}}
	a := startNode(t, region("A", cluster.Auth{User: "gw", Password: gatewaySecret}, toB))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitAll(t, ctx, a, b)
	if a.Server().NumOutboundGateways() != 1 || b.Server().NumOutboundGateways() != 1 {
		t.Fatalf("outbound gateways: A %d, B %d; want 1 each", a.Server().NumOutboundGateways(), b.Server().NumOutboundGateways())
	}

	for _, c := range []struct {
		name string
		auth cluster.Auth
	}{
		{"no credentials", cluster.Auth{}},
		{"wrong password", cluster.Auth{User: "gw", Password: "guess"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			isink := &logSink{}
			dumpOnFailure(t, "intruder", isink)
			in := startNode(t, cluster.Config{
				Name: "intruder-" + strings.ReplaceAll(c.name, " ", "-"), Port: -1, NoJetStream: true, Logger: slog.New(isink),
				Region:  "X" + strings.ReplaceAll(c.name, " ", "_"),
				Gateway: cluster.GatewayConfig{Listen: "127.0.0.1:0", Authorization: c.auth, Gateways: []cluster.RemoteGateway{toB}},
			})
			enginetest.Eventually(t, 10*time.Second, func() error {
				if isink.find("authorization violation") != "" {
					return nil
				}
				return errors.New("no authorization error logged yet")
			})
			if n := in.Server().NumOutboundGateways(); n != 0 {
				t.Fatalf("the intruder has %d outbound gateways", n)
			}
			noSecrets(t, isink, gatewaySecret)
		})
	}
	t.Cleanup(func() {
		gz, err := b.Server().Gatewayz(nil)
		if err != nil {
			t.Fatal(err)
		}
		for name := range gz.InboundGateways {
			if name != "A" {
				t.Errorf("B has an inbound gateway from %q", name)
			}
		}
		noSecrets(t, sink, gatewaySecret)
	})
}

// A route, gateway or leaf node listener on a non-loopback address without
// authentication is logged as a warning at start, naming the setting that
// closes it; loopback or authenticated listeners are not.
func TestOpenListenerWarning(t *testing.T) {
	t.Parallel()
	auth := cluster.Auth{User: "u", Password: "p"}
	for _, c := range []struct {
		name string
		cfg  cluster.Config
		want string // "" = no warning
	}{
		{"routes on all interfaces", cluster.Config{Cluster: cluster.ClusterConfig{Listen: "0.0.0.0:0"}}, "cluster.authorization"},
		{"routes on an empty host", cluster.Config{Cluster: cluster.ClusterConfig{Listen: ":0"}}, "cluster.authorization"},
		{"routes on loopback", cluster.Config{Cluster: cluster.ClusterConfig{Listen: "127.0.0.1:0"}}, ""},
		{"routes authenticated", cluster.Config{Cluster: cluster.ClusterConfig{Listen: "0.0.0.0:0", Authorization: auth}}, ""},
		{"gateway on all interfaces", cluster.Config{Region: "R", Gateway: cluster.GatewayConfig{Listen: "0.0.0.0:0"}}, "gateway.authorization"},
		{"gateway authenticated", cluster.Config{Region: "R", Gateway: cluster.GatewayConfig{Listen: "0.0.0.0:0", Authorization: auth}}, ""},
		{"leaf nodes without users", cluster.Config{LeafNodes: cluster.LeafNodeConfig{Listen: "0.0.0.0:0"}}, "leafnodes.users"},
		{"leaf nodes with users", cluster.Config{LeafNodes: cluster.LeafNodeConfig{Listen: "0.0.0.0:0", Users: []cluster.LeafUser{{User: "u", Password: "p"}}}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sink := &logSink{}
			cfg := c.cfg
			cfg.Name, cfg.Port, cfg.NoJetStream, cfg.Logger = "w", -1, true, slog.New(sink)
			startNode(t, cfg)
			got := sink.find("without authentication")
			switch {
			case c.want == "" && got != "":
				t.Fatalf("warned: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("warning %q, want one naming %s", got, c.want)
			}
		})
	}
}

// A password file that is missing or empty fails Start, naming the
// setting; Validate leaves it alone (a config is checked on other
// machines than the one holding the secret).
func TestPasswordFileErrors(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file, want string
	}{
		{"missing", filepath.Join(t.TempDir(), "nope"), "no such file"},
		{"empty", empty, "is empty"},
	} {
		cfg := cluster.Config{Name: "n", Port: -1, NoJetStream: true, Region: "R",
			Gateway: cluster.GatewayConfig{Listen: "127.0.0.1:0", Authorization: cluster.Auth{User: "gw", PasswordFile: c.file}}}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: Validate = %v, want nil", c.name, err)
		}
		_, err := cluster.Start(context.Background(), cfg)
		if !errors.Is(err, cluster.ErrInvalidConfig) || !strings.Contains(err.Error(), "gateway.authorization") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Start = %v, want ErrInvalidConfig naming gateway.authorization and %q", c.name, err, c.want)
		}
	}
}
