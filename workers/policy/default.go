package policy

import _ "embed"

// DefaultFileName is the policy file's name in the node's home directory.
const DefaultFileName = "iii-permissions.yaml"

//go:embed default-permissions.yaml
var defaultYAML []byte

// DefaultYAML returns the shipped default policy file: it denies the model
// the harness's control surface, allows read-only introspection, and leaves
// everything else to approval (see the package documentation).
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }

// Default parses the shipped default policy with opts.
func Default(opts ...Option) (*Policy, error) { return Parse(defaultYAML, opts...) }
