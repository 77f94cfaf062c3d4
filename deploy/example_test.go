package deploy_test

import (
	"fmt"
	"io/fs"

	"github.com/iii-on-nats/iii/deploy"
)

// The embedded files, listed: what `kubectl apply -k` reads and the iii
// configs of the 3-node cluster.
func Example() {
	for _, pattern := range []string{"kubernetes/*.yaml", "iii/cluster-3node/*.yaml"} {
		files, err := fs.Glob(deploy.Files, pattern)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, f := range files {
			fmt.Println(f)
		}
	}
	// Output:
	// kubernetes/configmap.yaml
	// kubernetes/kustomization.yaml
	// kubernetes/pdb.yaml
	// kubernetes/service-headless.yaml
	// kubernetes/service.yaml
	// kubernetes/statefulset.yaml
	// iii/cluster-3node/n1.yaml
	// iii/cluster-3node/n2.yaml
	// iii/cluster-3node/n3.yaml
}
