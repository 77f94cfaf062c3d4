package cluster

import (
	"bytes"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"
)

// NodeFile is `iii up --config FILE`: every `iii up` flag as a YAML key
// (deploy/iii/ has complete examples). The topology blocks are this
// package's own configuration types. A flag given on the command line
// wins over the file.
type NodeFile struct {
	Name        string  `yaml:"name"`
	Home        string  `yaml:"home"`
	Listen      string  `yaml:"listen"`
	HTTP        *string `yaml:"http"` // nil: the default; "": off
	MonitorPort int     `yaml:"monitor_port"`
	Metrics     string  `yaml:"metrics"`
	NoTraces    bool    `yaml:"no_traces"`
	// HeapFloorMiB is `iii up --heap-floor-mib` (nil: the default; 0: off).
	HeapFloorMiB *int `yaml:"heap_floor_mib"`
	// MaxPayload is `iii up --max-payload` (0: 1 MiB).
	MaxPayload int32          `yaml:"max_payload"`
	Cluster    ClusterConfig  `yaml:"cluster"`
	Region     string         `yaml:"region"`
	Gateway    GatewayConfig  `yaml:"gateway"`
	LeafNodes  LeafNodeConfig `yaml:"leafnodes"`
	Leaf       LeafConfig     `yaml:"leaf"`
	Join       string         `yaml:"join"`
	Creds      string         `yaml:"creds"`
	Replicas   int            `yaml:"replicas"`
	Actor      ActorConfig    `yaml:"actor"`
	// Workers are the worker modules to start; Set their settings
	// ("orchestrator.max_turns": "20").
	Workers []string          `yaml:"workers"`
	Set     map[string]string `yaml:"set"`
}

// ActorConfig is the session grains' proto.actor remote (gRPC).
type ActorConfig struct {
	Listen    string `yaml:"listen"`
	Advertise string `yaml:"advertise"`
}

// DecodeNodeFile decodes one node file strictly: an unknown key is an
// error wrapping ErrInvalidConfig.
func DecodeNodeFile(data []byte) (NodeFile, error) {
	var f NodeFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return f, nil
}

// LoadNodeFile reads and decodes the node file at path.
func LoadNodeFile(path string) (NodeFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return NodeFile{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	f, err := DecodeNodeFile(data)
	if err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}
