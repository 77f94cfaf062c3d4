package cluster_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/iii-on-nats/iii/cluster"
)

// fullConfig sets every field (Logger aside: it is not configuration).
func fullConfig() cluster.Config {
	return cluster.Config{
		Name: "n1", Host: "0.0.0.0", Port: 4222, StoreDir: "/var/lib/iii/js",
		MaxMemory: 1 << 30, MaxStore: 100 << 30, MaxPayload: 8 << 20, MonitorPort: 8222, Debug: true,
		Cluster: cluster.ClusterConfig{
			Name: "eu", Listen: "0.0.0.0:6222", Advertise: "n1.eu.example:6222",
			Routes:        []string{"nats-route://n1.eu.example:6222", "nats-route://n2.eu.example:6222", "nats-route://n3.eu.example:6222"},
			PoolSize:      4,
			Authorization: cluster.Auth{User: "route", Password: "route-s3cret"},
		},
		Region: "eu",
		Gateway: cluster.GatewayConfig{Listen: ":7222", Advertise: "gw.eu.example:7222",
			Gateways:      []cluster.RemoteGateway{{Name: "us", URLs: []string{"nats://gw.us.example:7222"}}},
			Authorization: cluster.Auth{User: "gw", Password: "gw-s3cret"}},
		LeafNodes: cluster.LeafNodeConfig{Listen: ":7422", Advertise: "leaf.eu.example:7422",
			Users: []cluster.LeafUser{{User: "edge", Password: "s3cret"}}},
		NoJetStream: false,
	}
}

func TestValidateGood(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]cluster.Config{
		"standalone": {StoreDir: "/d"},
		"full":       fullConfig(),
		"random ports": {Name: "a", StoreDir: "/d", Port: -1,
			Cluster: cluster.ClusterConfig{Listen: "127.0.0.1:0", Routes: []string{"nats-route://127.0.0.1:6222"}}},
		"one-node region": {Name: "a", StoreDir: "/d", Region: "A", Gateway: cluster.GatewayConfig{Listen: ":0"}},
		"own region listed": {Name: "a", StoreDir: "/d", Region: "A", Gateway: cluster.GatewayConfig{Listen: ":0",
			Gateways: []cluster.RemoteGateway{{Name: "A"}, {Name: "B", URLs: []string{"nats://b:7222"}}}}},
		"leaf without store":  {Name: "edge", Leaf: cluster.LeafConfig{URLs: []string{"nats-leaf://hub:7422", "wss://hub:443"}, User: "u", Password: "p"}},
		"routing-only member": {Name: "r", NoJetStream: true, Cluster: cluster.ClusterConfig{Listen: ":6222"}},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateBad(t *testing.T) {
	t.Parallel()
	creds := filepath.Join(t.TempDir(), "edge.creds")
	if err := os.WriteFile(creds, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	clustered := func(f func(*cluster.Config)) cluster.Config {
		c := cluster.Config{Name: "n1", StoreDir: "/d", Cluster: cluster.ClusterConfig{
			Listen: "127.0.0.1:6222", Routes: []string{"nats-route://127.0.0.1:6222", "nats-route://127.0.0.1:6223"}}}
		f(&c)
		return c
	}
	leaf := func(f func(*cluster.Config)) cluster.Config {
		c := cluster.Config{Name: "edge", Leaf: cluster.LeafConfig{URLs: []string{"nats-leaf://hub:7422"}}}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  cluster.Config
		want string
	}{
		{"no store dir", cluster.Config{}, "store_dir is required"},
		{"port", cluster.Config{StoreDir: "/d", Port: 70000}, "port 70000 is out of range"},
		{"bad name", cluster.Config{StoreDir: "/d", Name: "my node"}, `name "my node"`},
		{"negative max", cluster.Config{StoreDir: "/d", MaxStore: -1}, "must not be negative"},
		{"payload", cluster.Config{StoreDir: "/d", MaxPayload: 128 << 20}, "max_payload"},
		{"cluster without name", clustered(func(c *cluster.Config) { c.Name = "" }), "name is required"},
		{"listen not host:port", clustered(func(c *cluster.Config) { c.Cluster.Listen = "6222" }), `cluster.listen: "6222" is not host:port`},
		{"listen port", clustered(func(c *cluster.Config) { c.Cluster.Listen = "h:99999" }), "is not 0-65535"},
		{"advertise port 0", clustered(func(c *cluster.Config) { c.Cluster.Advertise = "h:0" }), "cluster.advertise"},
		{"route scheme", clustered(func(c *cluster.Config) { c.Cluster.Routes = []string{"http://h:6222"} }), "cluster.routes[0]: \"http://h:6222\": scheme must be nats-route://"},
		{"route without port", clustered(func(c *cluster.Config) { c.Cluster.Routes = []string{"nats-route://h"} }), "a port 1-65535 is required"},
		{"route with path", clustered(func(c *cluster.Config) { c.Cluster.Routes = []string{"nats-route://h:1/x"} }), "nothing may follow"},
		{"routes without listen", cluster.Config{StoreDir: "/d", Cluster: cluster.ClusterConfig{Routes: []string{"nats-route://h:1"}}}, "need cluster.listen"},
		{"JetStream cluster without routes", clustered(func(c *cluster.Config) { c.Cluster.Routes = nil }), "cluster.routes is empty"},
		{"JetStream cluster of one", clustered(func(c *cluster.Config) { c.Cluster.Routes = c.Cluster.Routes[:1] }), "cluster.routes name only this node"},
		{"cluster of one on a wildcard listen", clustered(func(c *cluster.Config) {
			c.Cluster.Listen, c.Cluster.Routes = "0.0.0.0:6222", []string{"nats-route://localhost:6222"}
		}), "cluster.routes name only this node"},
		{"cluster of one by advertise", clustered(func(c *cluster.Config) {
			c.Cluster.Listen, c.Cluster.Advertise, c.Cluster.Routes = ":6222", "n1.example:6222", []string{"nats-route://n1.example:6222"}
		}), "cluster.routes name only this node"},
		{"pool size", clustered(func(c *cluster.Config) { c.Cluster.PoolSize = -2 }), "cluster.pool_size -2"},
		{"region != cluster name", clustered(func(c *cluster.Config) { c.Region, c.Cluster.Name = "eu", "us" }), `region "eu" and cluster.name "us" differ`},
		{"bad region", clustered(func(c *cluster.Config) { c.Region = "eu west" }), `region "eu west"`},
		{"gateway without region", clustered(func(c *cluster.Config) { c.Gateway.Listen = ":7222" }), "gateway.listen needs region"},
		{"gateways without listen", clustered(func(c *cluster.Config) {
			c.Gateway.Gateways = []cluster.RemoteGateway{{Name: "B", URLs: []string{"nats://b:7222"}}}
		}), "need gateway.listen"},
		{"duplicate gateway", clustered(func(c *cluster.Config) {
			c.Region, c.Gateway.Listen = "A", ":7222"
			c.Gateway.Gateways = []cluster.RemoteGateway{{Name: "B", URLs: []string{"nats://b:7222"}}, {Name: "B", URLs: []string{"nats://b2:7222"}}}
		}), `duplicate gateway name "B"`},
		{"gateway without urls", clustered(func(c *cluster.Config) {
			c.Region, c.Gateway.Listen = "A", ":7222"
			c.Gateway.Gateways = []cluster.RemoteGateway{{Name: "B"}}
		}), `"B": urls is empty`},
		{"gateway url scheme", clustered(func(c *cluster.Config) {
			c.Region, c.Gateway.Listen = "A", ":7222"
			c.Gateway.Gateways = []cluster.RemoteGateway{{Name: "B", URLs: []string{"nats-route://b:7222"}}}
		}), "scheme must be nats://"},
		{"leaf users without listen", cluster.Config{StoreDir: "/d", LeafNodes: cluster.LeafNodeConfig{Users: []cluster.LeafUser{{User: "u", Password: "p"}}}}, "need leafnodes.listen"},
		{"leaf user without password", cluster.Config{StoreDir: "/d", LeafNodes: cluster.LeafNodeConfig{Listen: ":7422", Users: []cluster.LeafUser{{User: "u"}}}}, "user and password are both required"},
		{"duplicate leaf user", cluster.Config{StoreDir: "/d", LeafNodes: cluster.LeafNodeConfig{Listen: ":7422",
			Users: []cluster.LeafUser{{User: "u", Password: "p"}, {User: "u", Password: "q"}}}}, `duplicate user "u"`},
		{"leaf and cluster", leaf(func(c *cluster.Config) { c.Cluster.Listen = ":6222" }), "leaf and cluster/gateway/region are exclusive"},
		{"leaf without name", leaf(func(c *cluster.Config) { c.Name = "" }), "name is required"},
		{"leaf url scheme", leaf(func(c *cluster.Config) { c.Leaf.URLs = []string{"http://hub:7422"} }), "leaf.urls[0]"},
		{"leaf password only", leaf(func(c *cluster.Config) { c.Leaf.Password = "p" }), "leaf.user and leaf.password go together"},
		{"leaf creds and user", leaf(func(c *cluster.Config) { c.Leaf.User, c.Leaf.Password, c.Leaf.Credentials = "u", "p", creds }), "exclusive"},
		{"leaf creds missing", leaf(func(c *cluster.Config) { c.Leaf.Credentials = "/nonexistent/x.creds" }), "leaf.credentials"},
		{"leaf user twice", leaf(func(c *cluster.Config) {
			c.Leaf.URLs, c.Leaf.User, c.Leaf.Password = []string{"nats-leaf://a:b@hub:7422"}, "u", "p"
		}), "credentials both in the URL"},
		{"leaf user without urls", cluster.Config{StoreDir: "/d", Leaf: cluster.LeafConfig{User: "u", Password: "p"}}, "need leaf.urls"},
		{"route auth without listen", cluster.Config{StoreDir: "/d", Cluster: cluster.ClusterConfig{Authorization: cluster.Auth{User: "u", Password: "p"}}}, "cluster.authorization needs cluster.listen"},
		{"route password without user", clustered(func(c *cluster.Config) { c.Cluster.Authorization.Password = "p" }), "cluster.authorization.user is required"},
		{"route user without password", clustered(func(c *cluster.Config) { c.Cluster.Authorization.User = "u" }), "needs cluster.authorization.password or cluster.authorization.password_file"},
		{"route password twice", clustered(func(c *cluster.Config) {
			c.Cluster.Authorization = cluster.Auth{User: "u", Password: "p", PasswordFile: creds}
		}), "are exclusive"},
		{"route password bcrypt", clustered(func(c *cluster.Config) {
			c.Cluster.Authorization = cluster.Auth{User: "u", Password: "$2a$11$qbtrnb0mSG2eV55xoyPqHOZx/lLBlryHRhU3LK2oOPFRwGF/5rtGK"}
		}), "bcrypt hash"},
		{"gateway auth without listen", clustered(func(c *cluster.Config) { c.Gateway.Authorization = cluster.Auth{User: "u", Password: "p"} }), "gateway.authorization need gateway.listen"},
		{"gateway password without user", clustered(func(c *cluster.Config) {
			c.Region, c.Gateway.Listen, c.Gateway.Authorization = "A", ":7222", cluster.Auth{Password: "p"}
		}), "gateway.authorization.user is required"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.want)
		}
	}
}

// Credentials in a route or gateway URL are refused (they show in process
// listings and logs: cluster.authorization carries them), and the error
// does not repeat the password, nor does any URL error.
func TestValidateHidesURLPasswords(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-Qx"
	for _, c := range []struct {
		name string
		cfg  cluster.Config
		want string
	}{
		{"route", cluster.Config{Name: "n1", NoJetStream: true, Cluster: cluster.ClusterConfig{Listen: ":6222",
			Routes: []string{"nats-route://u:" + pw + "@h:6222"}}}, "set cluster.authorization"},
		{"gateway", cluster.Config{Name: "n1", NoJetStream: true, Region: "A", Gateway: cluster.GatewayConfig{Listen: ":7222",
			Gateways: []cluster.RemoteGateway{{Name: "B", URLs: []string{"nats://u:" + pw + "@b:7222"}}}}}, "set gateway.authorization"},
		{"bad route", cluster.Config{Name: "n1", NoJetStream: true, Cluster: cluster.ClusterConfig{Listen: ":6222",
			Routes: []string{"nats-route://u:" + pw + "@h:6222/x"}}}, "nothing may follow"},
		{"unparsable leaf url", cluster.Config{Name: "e", Leaf: cluster.LeafConfig{URLs: []string{"nats-leaf://u:" + pw + "@h:%zz"}}}, "is not a URL"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("%s: the error repeats the password: %v", c.name, err)
		}
	}
	// An Auth printed by mistake shows no password.
	a := cluster.Auth{User: "u", Password: pw}
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a), fmt.Sprintf("%v", cluster.ClusterConfig{Authorization: a})} {
		if strings.Contains(s, pw) {
			t.Errorf("printed Auth holds the password: %s", s)
		}
	}
}

func TestValidateReportsAll(t *testing.T) {
	t.Parallel()
	err := cluster.Config{Port: -5, Region: "a b"}.Validate()
	for _, want := range []string{"port -5", "store_dir", `region "a b"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestPeersReplicas(t *testing.T) {
	t.Parallel()
	routes := func(hps ...string) []string {
		var r []string
		for _, hp := range hps {
			r = append(r, "nats-route://"+hp)
		}
		return r
	}
	for _, tc := range []struct {
		name     string
		cc       cluster.ClusterConfig
		peers, r int
	}{
		{"standalone", cluster.ClusterConfig{}, 1, 1},
		{"seed only", cluster.ClusterConfig{Listen: "127.0.0.1:0", Routes: routes("127.0.0.1:6222")}, 2, 1},
		{"full list incl. self", cluster.ClusterConfig{Listen: "10.0.0.1:6222", Routes: routes("10.0.0.1:6222", "10.0.0.2:6222", "10.0.0.3:6222")}, 3, 3},
		{"self by advertise", cluster.ClusterConfig{Listen: ":6222", Advertise: "n1.example:6222", Routes: routes("N1.example:6222", "n2.example:6222", "n3.example:6222")}, 3, 3},
		{"self on wildcard listen", cluster.ClusterConfig{Listen: ":6222", Routes: routes("localhost:6222", "n2:6222", "n3:6222")}, 3, 3},
		{"duplicates", cluster.ClusterConfig{Listen: ":7000", Routes: routes("n2:6222", "n2:6222", "N2:06222")}, 2, 1},
		{"five", cluster.ClusterConfig{Listen: ":0", Routes: routes("a:1", "b:1", "c:1", "d:1")}, 5, 3},
		{"bad routes ignored", cluster.ClusterConfig{Listen: ":0", Routes: []string{"junk", "http://x:1"}}, 1, 1},
	} {
		c := cluster.Config{Cluster: tc.cc}
		if p, r := c.Peers(), c.Replicas(); p != tc.peers || r != tc.r {
			t.Errorf("%s: Peers, Replicas = %d, %d; want %d, %d", tc.name, p, r, tc.peers, tc.r)
		}
	}
}

func TestConfigYAML(t *testing.T) {
	t.Parallel()
	want := fullConfig()
	want.Leaf = cluster.LeafConfig{URLs: []string{"nats-leaf://hub:7422"}, User: "u", Password: "p", Credentials: "/x.creds"}
	want.NoJetStream = true
	b, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"store_dir:", "max_memory:", "max_payload:", "monitor_port:", "pool_size:", "no_jetstream:",
		"leafnodes:", "\nleaf:", "gateways:", "urls:", "credentials:", "advertise:", "region:", "authorization:", "password_file:"} {
		if !strings.Contains(string(b), key) {
			t.Errorf("yaml lacks %q:\n%s", key, b)
		}
	}
	if strings.Contains(string(b), "logger") {
		t.Errorf("the logger must not be serialised:\n%s", b)
	}
	var got cluster.Config
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}

	// A hand-written file.
	const doc = `
name: eu-1
store_dir: /var/lib/iii
region: eu
cluster:
  listen: 0.0.0.0:6222
  routes: [nats-route://eu-1:6222, nats-route://eu-2:6222, nats-route://eu-3:6222]
gateway:
  listen: 0.0.0.0:7222
  gateways:
    - name: us
      urls: [nats://us-1:7222]
leafnodes:
  listen: 0.0.0.0:7422
  users: [{user: edge, password: secret}]
`
	var c cluster.Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Replicas() != 3 || c.Gateway.Gateways[0].URLs[0] != "nats://us-1:7222" || c.LeafNodes.Users[0].Password != "secret" {
		t.Fatalf("decoded %+v", c)
	}
}

// The node file is decoded strictly; the topology blocks are this
// package's types.
func TestDecodeNodeFile(t *testing.T) {
	f, err := cluster.DecodeNodeFile([]byte("name: n1\ncluster:\n  name: east\n  routes: [nats-route://a:6222]\nactor:\n  listen: 0.0.0.0:8090\nset:\n  orchestrator.max_turns: \"20\"\n"))
	if err != nil || f.Name != "n1" || f.Cluster.Name != "east" || len(f.Cluster.Routes) != 1 || f.Actor.Listen != "0.0.0.0:8090" || f.Set["orchestrator.max_turns"] != "20" {
		t.Fatalf("decode = %+v, %v", f, err)
	}
	for _, bad := range []string{"nmae: n1\n", "cluster:\n  nmae: x\n", "replicas: three\n", ": :\n"} {
		if _, err := cluster.DecodeNodeFile([]byte(bad)); !errors.Is(err, cluster.ErrInvalidConfig) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := cluster.LoadNodeFile(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, cluster.ErrInvalidConfig) {
		t.Errorf("missing file: %v", err)
	}
}
