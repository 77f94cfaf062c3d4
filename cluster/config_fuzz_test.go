package cluster

import (
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzConfig decodes arbitrary YAML into a Config: decoding, Validate,
// Peers and Replicas never panic, and a config that validates always
// translates into server options.
func FuzzConfig(f *testing.F) {
	for _, seed := range []string{
		"store_dir: /d\n",
		"name: n1\nstore_dir: /d\ncluster: {listen: '127.0.0.1:6222', routes: ['nats-route://127.0.0.1:6222', 'nats-route://h2:6222']}\n",
		"name: a\nstore_dir: /d\nregion: A\ngateway: {listen: ':0', gateways: [{name: B, urls: ['nats://b:7222']}]}\n",
		"name: e\nleaf: {urls: ['nats-leaf://u:p@hub:7422', 'wss://hub:443'], user: u}\n",
		"store_dir: /d\nleafnodes: {listen: ':7422', users: [{user: u, password: p}, {user: u}]}\n",
		"port: -1\ncluster: {listen: '[::1]:0', routes: ['nats-route://[::1]:6222', 'nats://%zz', '']}\n",
		"cluster: {listen: ':', advertise: ':', pool_size: -9}\nregion: ''\n",
		"max_payload: 99999999999\nmonitor_port: -1\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Config
		if err := yaml.Unmarshal(data, &c); err != nil {
			return
		}
		err := c.Validate()
		if p := c.Peers(); p < 1 {
			t.Fatalf("Peers = %d", p)
		}
		if r := c.Replicas(); r != 1 && r != 3 {
			t.Fatalf("Replicas = %d", r)
		}
		if err != nil {
			return
		}
		if _, err := c.options(); err != nil {
			t.Fatalf("valid config %+v does not translate: %v", c, err)
		}
	})
}
