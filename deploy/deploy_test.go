package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/cluster/freeport"
	"github.com/iii-on-nats/iii/deploy"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// Secrets the nats-server configs read from the environment. TestMain sets
// them (tests that call t.Setenv cannot run in parallel).
var natsSecrets = map[string]string{
	"III_NATS_PASSWORD": "iii-test-password",
	"NATS_SYS_PASSWORD": "sys-test-password",
	"III_LEAF_PASSWORD": "leaf-test-password",
}

func TestMain(m *testing.M) {
	for k, v := range natsSecrets {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// Ports every config of this folder uses; the tests hold the files to them.
const (
	clientPort  = 4222
	routePort   = 6222
	gatewayPort = 7222
	leafPort    = 7422
	monitorPort = 8222
	actorPort   = 8090
	httpPort    = 3111
	metricsPort = 9464
	hostDomain  = ".iii.internal"
)

// regions of the supercluster, three servers each.
var regions = []string{"east", "west", "eu"}

// glob lists the embedded files matching pattern, failing on none.
func glob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := fs.Glob(deploy.Files, pattern)
	if err != nil || len(m) == 0 {
		t.Fatalf("no files match %s: %v", pattern, err)
	}
	return m
}

// natsServerConfs are the per-server nats configs (common.conf is the
// shared include).
func natsServerConfs(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, p := range glob(t, "nats/"+dir+"/*.conf") {
		if path.Base(p) != "common.conf" {
			out = append(out, p)
		}
	}
	return out
}

// stem is a file name without folder and extension.
func stem(p string) string { return strings.TrimSuffix(path.Base(p), path.Ext(p)) }

// processConf parses a nats-server config the way nats-server does. The
// embedded files are the folder's files, so the path on disk is the same.
func processConf(t *testing.T, p string) *server.Options {
	t.Helper()
	o, err := server.ProcessConfigFile(filepath.FromSlash(p))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return o
}

func urlHosts(us []*url.URL) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.Host)
	}
	slices.Sort(out)
	return out
}

// hostsOf is "prefix-1.iii.internal:port" ... for n servers, sorted.
func hostsOf(names []string, port int) []string {
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("%s%s:%d", n, hostDomain, port))
	}
	slices.Sort(out)
	return out
}

func regionServers(r string) []string { return []string{r + "-1", r + "-2", r + "-3"} }

func TestNATSConfigs(t *testing.T) {
	t.Parallel()
	type topo struct {
		dir string
		// clusterOf maps a server name to its cluster name.
		clusterOf func(name string) string
		// peersOf lists the servers of a server's cluster.
		peersOf  func(name string) []string
		gateways bool
	}
	topos := []topo{
		{
			dir:       "cluster-3node",
			clusterOf: func(string) string { return "iii" },
			peersOf:   func(string) []string { return []string{"n1", "n2", "n3"} },
		},
		{
			dir:       "supercluster",
			clusterOf: func(n string) string { r, _, _ := strings.Cut(n, "-"); return r },
			peersOf:   func(n string) []string { r, _, _ := strings.Cut(n, "-"); return regionServers(r) },
			gateways:  true,
		},
	}
	for _, tp := range topos {
		t.Run(tp.dir, func(t *testing.T) {
			t.Parallel()
			files := natsServerConfs(t, tp.dir)
			names := map[string]bool{}
			for _, f := range files {
				o := processConf(t, f)
				name := stem(f)
				if o.ServerName != name {
					t.Errorf("%s: server_name %q, want %q (the file name)", f, o.ServerName, name)
				}
				if names[o.ServerName] {
					t.Errorf("%s: server_name %q is not unique", f, o.ServerName)
				}
				names[o.ServerName] = true
				checkCommonNATS(t, f, o)

				wantCluster := tp.clusterOf(name)
				if o.Cluster.Name != wantCluster || o.Cluster.Port != routePort {
					t.Errorf("%s: cluster %q port %d, want %q port %d", f, o.Cluster.Name, o.Cluster.Port, wantCluster, routePort)
				}
				for _, r := range o.Routes {
					if r.Scheme != "nats-route" {
						t.Errorf("%s: route %s: want nats-route://", f, r)
					}
				}
				if got, want := urlHosts(o.Routes), hostsOf(tp.peersOf(name), routePort); !slices.Equal(got, want) {
					t.Errorf("%s: routes %v, want every server of the cluster %v", f, got, want)
				}

				if !tp.gateways {
					if o.Gateway.Name != "" || o.Gateway.Port != 0 {
						t.Errorf("%s: a single cluster has no gateway", f)
					}
				} else {
					checkGateways(t, f, o, wantCluster)
				}

				// nats-server's own validation (name conflicts, TLS, limits)
				// runs in NewServer; nothing is started.
				o.StoreDir = t.TempDir()
				o.NoLog, o.NoSigs = true, true
				if _, err := server.NewServer(o); err != nil {
					t.Errorf("%s: nats-server refuses the options: %v", f, err)
				}
			}
			if want := 3; tp.dir == "cluster-3node" && len(names) != want {
				t.Errorf("%d servers, want %d", len(names), want)
			}
			if want := 3 * len(regions); tp.dir == "supercluster" && len(names) != want {
				t.Errorf("%d servers, want %d", len(names), want)
			}
		})
	}
}

// checkCommonNATS checks what every server shares (common.conf).
func checkCommonNATS(t *testing.T, f string, o *server.Options) {
	t.Helper()
	if o.Host != "0.0.0.0" || o.Port != clientPort {
		t.Errorf("%s: client listen %s:%d, want 0.0.0.0:%d", f, o.Host, o.Port, clientPort)
	}
	if o.HTTPPort != monitorPort {
		t.Errorf("%s: monitoring port %d, want %d", f, o.HTTPPort, monitorPort)
	}
	if o.MaxPayload != 1<<20 {
		t.Errorf("%s: max_payload %d, want 1 MiB like iii's embedded server", f, o.MaxPayload)
	}
	if !o.JetStream || o.StoreDir == "" {
		t.Errorf("%s: JetStream %v store_dir %q: want JetStream on with a store_dir", f, o.JetStream, o.StoreDir)
	}
	if o.JetStreamDomain != cluster.JetStreamDomain {
		t.Errorf("%s: JetStream domain %q, want %q (iii edge nodes map their API into it)", f, o.JetStreamDomain, cluster.JetStreamDomain)
	}
	if o.JetStreamMaxMemory <= 0 || o.JetStreamMaxStore <= 0 {
		t.Errorf("%s: max_memory_store %d, max_file_store %d: set both (the default is 75%% of the machine)", f, o.JetStreamMaxMemory, o.JetStreamMaxStore)
	}
	if o.LameDuckDuration < 30*time.Second {
		t.Errorf("%s: lame_duck_duration %v", f, o.LameDuckDuration)
	}
	if o.SystemAccount != "SYS" {
		t.Errorf("%s: system_account %q, want SYS (nats server report ... needs it)", f, o.SystemAccount)
	}
	users := map[string]string{}
	for _, u := range o.Users {
		if u.Account != nil {
			users[u.Username] = u.Account.Name
		}
		if u.Password == "" {
			t.Errorf("%s: user %s has no password", f, u.Username)
		}
	}
	if users["iii"] != "III" || users["admin"] != "SYS" {
		t.Errorf("%s: users %v, want iii in III and admin in SYS", f, users)
	}
	if o.LeafNode.Port != leafPort || len(o.LeafNode.Users) != 1 {
		t.Fatalf("%s: leafnodes port %d users %d, want %d and one user", f, o.LeafNode.Port, len(o.LeafNode.Users), leafPort)
	}
	if lu := o.LeafNode.Users[0]; lu.Username != "edge" || lu.Account == nil || lu.Account.Name != "III" || lu.Password == "" {
		t.Errorf("%s: leaf user %+v, want edge in account III with a password", f, lu)
	}
}

// checkGateways checks one supercluster server's gateway block.
func checkGateways(t *testing.T, f string, o *server.Options, region string) {
	t.Helper()
	if o.Gateway.Name != region || o.Gateway.Name != o.Cluster.Name {
		t.Errorf("%s: gateway %q cluster %q: both must be the region %q", f, o.Gateway.Name, o.Cluster.Name, region)
	}
	if o.Gateway.Port != gatewayPort {
		t.Errorf("%s: gateway port %d, want %d", f, o.Gateway.Port, gatewayPort)
	}
	if !slices.Contains(o.Tags, "region:"+region) {
		t.Errorf("%s: server_tags %v, want region:%s", f, o.Tags, region)
	}
	var got []string
	for _, g := range o.Gateway.Gateways {
		got = append(got, g.Name)
		for _, u := range g.URLs {
			if u.Scheme != "nats" {
				t.Errorf("%s: gateway %s url %s: want nats://", f, g.Name, u)
			}
		}
		if hosts, want := urlHosts(g.URLs), hostsOf(regionServers(g.Name), gatewayPort); !slices.Equal(hosts, want) {
			t.Errorf("%s: gateway %s urls %v, want %v", f, g.Name, hosts, want)
		}
	}
	slices.Sort(got)
	want := slices.Clone(regions)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: gateways %v, want every region %v", f, got, want)
	}
}

// freePorts reserves n distinct free loopback ports (released before use:
// another process could take one in between, which fails the test loudly).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	// Below the kernel's ephemeral range: a port picked with ":0" and
	// released can be taken by another test's connection before the
	// server binds it, and the server never becomes ready.
	ports, err := freeport.Loopback(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// bootCluster3 starts the three servers of nats/cluster-3node from their
// files, moved onto loopback ports and temporary store dirs: everything
// else (accounts, JetStream, domain, leaf users) is as written.
func bootCluster3(t *testing.T) (srvs []*server.Server, leafURL string) {
	t.Helper()
	files := natsServerConfs(t, "cluster-3node")
	ports := freePorts(t, len(files)+1)
	routeOf := map[string]int{}
	for i, f := range files {
		routeOf[stem(f)+hostDomain] = ports[i]
	}
	for i, f := range files {
		o := processConf(t, f)
		o.Host, o.Port = "127.0.0.1", -1
		o.HTTPHost, o.HTTPPort = "127.0.0.1", -1
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", ports[i]
		var routes []*url.URL
		for _, r := range o.Routes {
			p, ok := routeOf[r.Hostname()]
			if !ok {
				t.Fatalf("%s: route %s names no server of the cluster", f, r)
			}
			routes = append(routes, &url.URL{Scheme: r.Scheme, Host: fmt.Sprintf("127.0.0.1:%d", p)})
		}
		o.Routes = routes
		o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", -1
		if i == 0 {
			o.LeafNode.Port = ports[len(files)]
			leafURL = fmt.Sprintf("nats-leaf://127.0.0.1:%d", ports[len(files)])
		}
		o.StoreDir = t.TempDir()
		o.NoLog, o.NoSigs = true, true
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		srvs = append(srvs, s)
	}
	for _, s := range srvs {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s not ready", s.Name())
		}
	}
	return srvs, leafURL
}

// userURL is s's client URL with a user of common.conf.
func userURL(s *server.Server, user, password string) string {
	u, _ := url.Parse(s.ClientURL())
	u.User = url.UserPassword(user, password)
	return u.String()
}

// TestNATSCluster3Node boots the 3-node configs and runs, with the real
// nats CLI, the commands deploy/README.md gives for checking, backing up,
// restoring and removing a node; an iii edge node attaches as a leaf.
func TestNATSCluster3Node(t *testing.T) {
	t.Parallel()
	srvs, leafURL := bootCluster3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iiiURL := userURL(srvs[0], "iii", natsSecrets["III_NATS_PASSWORD"])
	sysURL := userURL(srvs[0], "admin", natsSecrets["NATS_SYS_PASSWORD"])

	nc, err := nats.Connect(iiiURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	enginetest.Eventually(t, 15*time.Second, func() error {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		defer acancel()
		// Fails until the meta group has elected a leader.
		kv, err = js.CreateKeyValue(actx, jetstream.KeyValueConfig{Bucket: "iii-state", Replicas: 3})
		return err
	})
	if _, err := kv.Put(ctx, "demo.greeting", []byte("hello")); err != nil {
		t.Fatal(err)
	}

	t.Run("health", func(t *testing.T) {
		for _, q := range []string{"/healthz", "/healthz?js-enabled-only=true"} {
			enginetest.Eventually(t, 10*time.Second, func() error {
				resp, err := http.Get("http://" + srvs[1].MonitorAddr().String() + q)
				if err != nil {
					return err
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("%s: %s", q, resp.Status)
				}
				return nil
			})
		}
		out := enginetest.RunNATS(t, sysURL, "server", "report", "jetstream")
		for _, n := range []string{"n1", "n2", "n3"} {
			if !strings.Contains(out, n) {
				t.Errorf("server report jetstream does not list %s:\n%s", n, out)
			}
		}
		out = enginetest.RunNATS(t, sysURL, "server", "check", "meta", "--expect", "3", "--lag-critical", "100", "--seen-critical", "5s")
		if !strings.HasPrefix(out, "OK") {
			t.Errorf("server check meta: %s", out)
		}
		out = enginetest.RunNATS(t, iiiURL, "stream", "report")
		if !strings.Contains(out, "KV_iii-state") {
			t.Errorf("stream report misses KV_iii-state:\n%s", out)
		}
	})

	t.Run("backup and restore", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "KV_iii-state")
		enginetest.RunNATS(t, iiiURL, "backup", "stream", "KV_iii-state", dir, "--no-progress")
		enginetest.RunNATS(t, iiiURL, "backup", "validate", dir, "--no-progress")
		if err := js.DeleteKeyValue(ctx, "iii-state"); err != nil {
			t.Fatal(err)
		}
		// The restore streams its chunks to the meta leader: right after
		// the delete, on a loaded machine, the leader's interest may not
		// have reached the node the CLI is connected to yet ("no
		// responders"). A failed restore leaves at most a partial stream,
		// removed before the next try.
		enginetest.Eventually(t, 20*time.Second, func() error {
			_, err := enginetest.TryNATS(t, iiiURL, "backup", "restore", "stream", dir, "--no-progress")
			if err != nil {
				if derr := js.DeleteStream(ctx, "KV_iii-state"); derr != nil && !errors.Is(derr, jetstream.ErrStreamNotFound) {
					return errors.Join(err, derr)
				}
			}
			return err
		})
		kv, err := js.KeyValue(ctx, "iii-state")
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, "demo.greeting")
		if err != nil || string(e.Value()) != "hello" {
			t.Fatalf("after restore: %v %v", e, err)
		}
	})

	t.Run("edge leaf", func(t *testing.T) {
		// An iii edge node (cluster.Config with leaf, as `iii up --leaf`
		// builds it) reaches the hub's JetStream through the leaf user of
		// common.conf and the "iii" domain.
		edge, err := cluster.Start(ctx, cluster.Config{
			Name: "edge-1", Port: -1,
			Leaf: cluster.LeafConfig{URLs: []string{leafURL}, User: "edge", Password: natsSecrets["III_LEAF_PASSWORD"]},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = edge.Close(ctx) }()
		enc, err := edge.Connect()
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		ejs, err := jetstream.New(enc)
		if err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, 10*time.Second, func() error {
			kv, err := ejs.KeyValue(ctx, "iii-state")
			if err != nil {
				return err
			}
			e, err := kv.Get(ctx, "demo.greeting")
			if err != nil {
				return err
			}
			if string(e.Value()) != "hello" {
				return fmt.Errorf("value %q", e.Value())
			}
			return nil
		})
	})

	t.Run("remove a node", func(t *testing.T) {
		srvs[2].Shutdown()
		srvs[2].WaitForShutdown()
		enginetest.RunNATS(t, sysURL, "server", "cluster", "peer-remove", "n3", "-f")
		enginetest.Eventually(t, 10*time.Second, func() error {
			jsz, err := srvs[0].Jsz(nil)
			if err != nil {
				return err
			}
			if jsz.Meta == nil || jsz.Meta.Size != 2 {
				return fmt.Errorf("meta group %+v, want 2 peers", jsz.Meta)
			}
			return nil
		})
	})
}
