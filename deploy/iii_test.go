package deploy_test

import (
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/deploy"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/std"
)

// iiiConfig is one `iii up --config FILE`, decoded by the loader iii up
// uses (cluster.NodeFile); the methods below are the test's.
type iiiConfig struct{ cluster.NodeFile }

// decodeIII decodes one iii YAML document strictly: an unknown key fails,
// as it does in `iii up --config`.
func decodeIII(data []byte) (iiiConfig, error) {
	f, err := cluster.DecodeNodeFile(data)
	return iiiConfig{f}, err
}

func loadIII(t *testing.T, p string) iiiConfig {
	t.Helper()
	data, err := fs.ReadFile(deploy.Files, p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeIII(data)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return c
}

// serverConfig is the embedded server's configuration, built from the file
// as `iii up` builds it (flag defaults included).
func (c iiiConfig) serverConfig() (cluster.Config, error) {
	listen := c.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, ps, err := net.SplitHostPort(listen)
	if err != nil {
		return cluster.Config{}, fmt.Errorf("listen: %w", err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return cluster.Config{}, fmt.Errorf("listen port: %w", err)
	}
	sc := cluster.Config{
		Name: c.Name, Host: host, Port: port, StoreDir: path.Join(c.Home, "jetstream"),
		MonitorPort: c.MonitorPort,
		Cluster:     c.Cluster, Region: c.Region, Gateway: c.Gateway,
		LeafNodes: c.LeafNodes, Leaf: c.Leaf,
	}
	if sc.Cluster.Name != "" && sc.Cluster.Listen == "" {
		sc.Cluster.Listen = "0.0.0.0:6222"
	}
	if len(sc.Gateway.Gateways) > 0 && sc.Gateway.Listen == "" {
		sc.Gateway.Listen = "0.0.0.0:7222"
	}
	return sc, nil
}

// clustered says whether the node shares session grains with others.
func (c iiiConfig) clustered() bool {
	return c.Cluster.Name != "" || c.Region != "" || len(c.Leaf.URLs) > 0 || c.Join != ""
}

// runs says whether the node starts worker module w.
func (c iiiConfig) runs(w string) bool {
	if c.Workers == nil {
		return slices.Contains(std.Default, w)
	}
	return slices.Contains(c.Workers, w)
}

// withoutSandbox is the default stack minus the sandbox worker, in order.
func withoutSandbox() []string {
	return slices.DeleteFunc(slices.Clone(std.Default), func(w string) bool { return w == "sandbox" })
}

// bcryptRE is nats-server's test for a bcrypt password (server/auth.go).
var bcryptRE = regexp.MustCompile(`^\$2[abxy]\$\d{2}\$.*`)

// portOf returns the port of host:port, or -1.
func portOf(hostport string) int {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
}

// checkIII checks what holds for every iii YAML of this folder.
func checkIII(t *testing.T, p string, c iiiConfig) {
	t.Helper()
	if c.Home != "" && !path.IsAbs(c.Home) {
		t.Errorf("%s: home %q is not absolute", p, c.Home)
	}
	if c.Join == "" {
		if portOf(c.Listen) != clientPort {
			t.Errorf("%s: listen %q, want port %d", p, c.Listen, clientPort)
		}
		sc, err := c.serverConfig()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("%s: cluster.Config.Validate: %v", p, err)
		}
		if c.Replicas != 0 && len(c.Leaf.URLs) == 0 && c.Replicas != sc.Replicas() {
			t.Errorf("%s: replicas %d, but the routes give %d", p, c.Replicas, sc.Replicas())
		}
	} else if c.Listen != "" || c.Cluster.Name != "" || c.Region != "" || len(c.Leaf.URLs) > 0 || c.LeafNodes.Listen != "" {
		t.Errorf("%s: join embeds no server: listen, cluster, region and leaf do not apply", p)
	}
	if c.HTTP != nil && *c.HTTP != "" && portOf(*c.HTTP) != httpPort {
		t.Errorf("%s: http %q, want port %d", p, *c.HTTP, httpPort)
	}
	if c.Metrics != "" && portOf(c.Metrics) != metricsPort {
		t.Errorf("%s: metrics %q, want port %d", p, c.Metrics, metricsPort)
	}
	if c.MonitorPort != 0 && c.MonitorPort != monitorPort {
		t.Errorf("%s: monitor_port %d, want %d", p, c.MonitorPort, monitorPort)
	}
	if c.LeafNodes.Listen != "" && portOf(c.LeafNodes.Listen) != leafPort {
		t.Errorf("%s: leafnodes.listen %q, want port %d", p, c.LeafNodes.Listen, leafPort)
	}
	// Routes and gateways on a network interface authenticate (an open
	// one lets any host that reaches it read every bucket), with the
	// password in a file, never in the config.
	for _, l := range []struct {
		key, listen string
		auth        cluster.Auth
	}{{"cluster", c.Cluster.Listen, c.Cluster.Authorization}, {"gateway", c.Gateway.Listen, c.Gateway.Authorization}} {
		if l.listen == "" {
			continue
		}
		if l.auth.User == "" || l.auth.PasswordFile == "" || l.auth.Password != "" {
			t.Errorf("%s: %s.listen %q: want %s.authorization with a user and a password_file", p, l.key, l.listen, l.key)
		}
	}
	for _, u := range c.LeafNodes.Users {
		if !bcryptRE.MatchString(u.Password) {
			t.Errorf("%s: leaf user %s: the password in a config file should be a bcrypt hash", p, u.User)
		}
	}
	for _, w := range c.Workers {
		if _, err := workers.Global().Module(w); err != nil {
			t.Errorf("%s: worker %q: %v", p, w, err)
		}
	}
	for k := range c.Set {
		w, key, ok := strings.Cut(k, ".")
		if !ok || key == "" {
			t.Errorf("%s: set %q: want WORKER.KEY", p, k)
			continue
		}
		if _, err := workers.Global().Module(w); err != nil {
			t.Errorf("%s: set %q: %v", p, k, err)
		}
	}
	if c.clustered() && c.runs("orchestrator") {
		// Grains move between nodes: other nodes dial the advertised
		// actor address.
		if portOf(c.Actor.Listen) != actorPort {
			t.Errorf("%s: actor.listen %q, want port %d", p, c.Actor.Listen, actorPort)
		}
		h, _, err := net.SplitHostPort(c.Actor.Advertise)
		if err != nil || h == "" || net.ParseIP(h).IsLoopback() || portOf(c.Actor.Advertise) != actorPort {
			t.Errorf("%s: actor.advertise %q: a clustered node needs an address the others reach, port %d", p, c.Actor.Advertise, actorPort)
		}
	}
}

func TestIIIConfigsDecode(t *testing.T) {
	t.Parallel()
	files := append(glob(t, "iii/*.yaml"), glob(t, "iii/*/*.yaml")...)
	for _, p := range files {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			checkIII(t, p, loadIII(t, p))
		})
	}
}

func TestIIIDecodeRejectsUnknownKeys(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"nmae: n1\n",
		"cluster:\n  name: iii\n  rutes: []\n",
		"gateway:\n  gateways:\n    - name: east\n      url: nats://x:7222\n",
		"leaf:\n  urls: [nats-leaf://x:7422]\n  pass: y\n",
		"actor:\n  listen: 0.0.0.0:8090\n  advertize: x:8090\n",
	} {
		if _, err := decodeIII([]byte(doc)); err == nil {
			t.Errorf("decoded %q without error", doc)
		}
	}
}

func TestIIISingle(t *testing.T) {
	t.Parallel()
	c := loadIII(t, "iii/single.yaml")
	if c.clustered() || c.Replicas != 1 {
		t.Errorf("single node: clustered %v replicas %d", c.clustered(), c.Replicas)
	}
	if h, _, _ := net.SplitHostPort(c.Listen); h != "127.0.0.1" {
		t.Errorf("a single node listens on loopback, not %q", c.Listen)
	}
}

func TestIIICluster3Node(t *testing.T) {
	t.Parallel()
	files := glob(t, "iii/cluster-3node/*.yaml")
	names := []string{"n1", "n2", "n3"}
	if got := len(files); got != len(names) {
		t.Fatalf("%d files, want %d", got, len(names))
	}
	sandboxes := 0
	for _, p := range files {
		c := loadIII(t, p)
		if c.Name != stem(p) || !slices.Contains(names, c.Name) {
			t.Errorf("%s: name %q", p, c.Name)
		}
		checkRoutes(t, p, c, "iii", names)
		if c.Replicas != 3 {
			t.Errorf("%s: replicas %d", p, c.Replicas)
		}
		if want := c.Name + hostDomain + ":" + strconv.Itoa(actorPort); c.Actor.Advertise != want {
			t.Errorf("%s: actor.advertise %q, want %q", p, c.Actor.Advertise, want)
		}
		sandboxes += countSandbox(t, p, c)
	}
	if sandboxes != 1 {
		t.Errorf("%d nodes run the sandbox worker, want exactly 1 (sandboxes are node-local)", sandboxes)
	}
}

func TestIIISupercluster(t *testing.T) {
	t.Parallel()
	files := glob(t, "iii/supercluster/*.yaml")
	if got, want := len(files), 3*len(regions); got != want {
		t.Fatalf("%d files, want %d", got, want)
	}
	sandboxes := 0
	for _, p := range files {
		c := loadIII(t, p)
		region, _, _ := strings.Cut(c.Name, "-")
		if c.Name != stem(p) || !slices.Contains(regions, region) {
			t.Errorf("%s: name %q", p, c.Name)
		}
		if c.Region != region || c.Cluster.Name != region {
			t.Errorf("%s: region %q cluster.name %q, want both %q", p, c.Region, c.Cluster.Name, region)
		}
		checkRoutes(t, p, c, region, regionServers(region))
		if portOf(c.Gateway.Listen) != gatewayPort {
			t.Errorf("%s: gateway.listen %q", p, c.Gateway.Listen)
		}
		var got []string
		for _, g := range c.Gateway.Gateways {
			got = append(got, g.Name)
			var hosts []string
			for _, s := range g.URLs {
				u, err := url.Parse(s)
				if err != nil || u.Scheme != "nats" {
					t.Errorf("%s: gateway %s url %q", p, g.Name, s)
					continue
				}
				hosts = append(hosts, u.Host)
			}
			slices.Sort(hosts)
			if want := hostsOf(regionServers(g.Name), gatewayPort); !slices.Equal(hosts, want) {
				t.Errorf("%s: gateway %s urls %v, want %v", p, g.Name, hosts, want)
			}
		}
		if !slices.Equal(got, regions) {
			t.Errorf("%s: gateways %v, want %v", p, got, regions)
		}
		sandboxes += countSandbox(t, p, c)
	}
	if sandboxes != 1 {
		t.Errorf("%d nodes run the sandbox worker, want exactly 1", sandboxes)
	}
}

// checkRoutes checks cluster name, listen, advertise and the seed routes of
// a node whose cluster is made of servers.
func checkRoutes(t *testing.T, p string, c iiiConfig, name string, servers []string) {
	t.Helper()
	if c.Cluster.Name != name || portOf(c.Cluster.Listen) != routePort {
		t.Errorf("%s: cluster %q listen %q", p, c.Cluster.Name, c.Cluster.Listen)
	}
	if want := c.Name + hostDomain + ":" + strconv.Itoa(routePort); c.Cluster.Advertise != want {
		t.Errorf("%s: cluster.advertise %q, want %q", p, c.Cluster.Advertise, want)
	}
	var hosts []string
	for _, r := range c.Cluster.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "nats-route" {
			t.Errorf("%s: route %q", p, r)
			continue
		}
		hosts = append(hosts, u.Host)
	}
	slices.Sort(hosts)
	if want := hostsOf(servers, routePort); !slices.Equal(hosts, want) {
		t.Errorf("%s: routes %v, want %v", p, hosts, want)
	}
}

// countSandbox returns 1 for a node that runs the sandbox worker; any other
// node must run exactly the default stack without it.
func countSandbox(t *testing.T, p string, c iiiConfig) int {
	t.Helper()
	if c.runs("sandbox") {
		return 1
	}
	if !slices.Equal(c.Workers, withoutSandbox()) {
		t.Errorf("%s: workers %v, want the default stack without sandbox %v", p, c.Workers, withoutSandbox())
	}
	return 0
}

func TestIIIEdge(t *testing.T) {
	t.Parallel()
	c := loadIII(t, "iii/edge/edge.yaml")
	hub := loadIII(t, "iii/cluster-3node/n1.yaml")
	if len(c.Leaf.URLs) != 3 {
		t.Fatalf("leaf.urls %v: want the three hub nodes", c.Leaf.URLs)
	}
	var hosts []string
	for _, s := range c.Leaf.URLs {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "nats-leaf" || u.User != nil {
			t.Errorf("leaf url %q: want nats-leaf://host:port, credentials in leaf.user", s)
			continue
		}
		hosts = append(hosts, u.Host)
	}
	slices.Sort(hosts)
	if want := hostsOf([]string{"n1", "n2", "n3"}, portOf(hub.LeafNodes.Listen)); !slices.Equal(hosts, want) {
		t.Errorf("leaf urls %v, want the hub's leafnodes listeners %v", hosts, want)
	}
	if len(hub.LeafNodes.Users) != 1 || c.Leaf.User != hub.LeafNodes.Users[0].User || c.Leaf.Password == "" {
		t.Errorf("leaf user %q: want the hub's leafnodes user and a password", c.Leaf.User)
	}
	if c.runs("orchestrator") || c.runs("sandbox") {
		t.Errorf("workers %v: an edge node runs what belongs on it, no grains or sandboxes", c.Workers)
	}
	if h, _, _ := net.SplitHostPort(c.Listen); h != "127.0.0.1" {
		t.Errorf("an edge node serves local clients only, listen %q", c.Listen)
	}
}

func TestIIIJoin(t *testing.T) {
	t.Parallel()
	c := loadIII(t, "iii/join.yaml")
	var hosts []string
	for _, s := range strings.Split(c.Join, ",") {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "nats" || u.User == nil || u.User.Username() != "iii" {
			t.Errorf("join url %q: want nats://iii:PASSWORD@host:port (user iii of account III)", s)
			continue
		}
		hosts = append(hosts, u.Host)
	}
	slices.Sort(hosts)
	var servers []string
	for _, f := range natsServerConfs(t, "cluster-3node") {
		servers = append(servers, stem(f))
	}
	if want := hostsOf(servers, clientPort); !slices.Equal(hosts, want) {
		t.Errorf("join hosts %v, want the nats/cluster-3node servers %v", hosts, want)
	}
	if c.Replicas != 3 {
		t.Errorf("replicas %d: the NATS cluster has three servers", c.Replicas)
	}
}
