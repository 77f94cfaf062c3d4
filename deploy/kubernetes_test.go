package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/iii-on-nats/iii/deploy"
)

// The parts of the Kubernetes objects the tests look at; decoding ignores
// the rest.
type (
	k8sMeta struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	}
	k8sObject struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Metadata   k8sMeta           `yaml:"metadata"`
		Data       map[string]string `yaml:"data"`
		Spec       yaml.Node         `yaml:"spec"`
		// file is where the object was found.
		file string
	}
	k8sService struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []k8sServicePort  `yaml:"ports"`
	}
	k8sServicePort struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"`
	}
	k8sPDB struct {
		MaxUnavailable int `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
	k8sProbe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	k8sContainer struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			ValueFrom struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		StartupProbe   *k8sProbe `yaml:"startupProbe"`
		ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
		LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
		Lifecycle      struct {
			PreStop *struct {
				Sleep *struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	k8sStatefulSet struct {
		Replicas            int    `yaml:"replicas"`
		ServiceName         string `yaml:"serviceName"`
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		Selector            struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
				Containers                    []k8sContainer `yaml:"containers"`
				Volumes                       []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					EmptyDir *struct{} `yaml:"emptyDir"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata k8sMeta `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	}
	kustomization struct {
		Resources []string `yaml:"resources"`
		Namespace string   `yaml:"namespace"`
	}
)

// decodeDocs decodes every document of a multi-document YAML stream.
func decodeDocs(data []byte) ([]k8sObject, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if o.Kind == "" && o.APIVersion == "" {
			continue // an empty document
		}
		out = append(out, o)
	}
}

// manifests loads what kustomization.yaml lists, keyed by kind, and checks
// that it lists every manifest of the folder.
func manifests(t *testing.T) map[string][]k8sObject {
	t.Helper()
	var k kustomization
	data, err := fs.ReadFile(deploy.Files, "kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	if k.Namespace != "" {
		t.Errorf("kustomization sets namespace %q: the manifests are namespace-less", k.Namespace)
	}
	var all []string
	for _, p := range glob(t, "kubernetes/*.yaml") {
		if path.Base(p) != "kustomization.yaml" {
			all = append(all, path.Base(p))
		}
	}
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(listed, all) {
		t.Errorf("kustomization resources %v, folder has %v", listed, all)
	}
	out := map[string][]k8sObject{}
	for _, r := range k.Resources {
		data, err := fs.ReadFile(deploy.Files, "kubernetes/"+r)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := decodeDocs(data)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		for _, o := range docs {
			o.file = r
			if o.Metadata.Namespace != "" {
				t.Errorf("%s: %s %s has namespace %q", r, o.Kind, o.Metadata.Name, o.Metadata.Namespace)
			}
			if o.APIVersion == "" || o.Metadata.Name == "" {
				t.Errorf("%s: a %s without apiVersion or name", r, o.Kind)
			}
			out[o.Kind] = append(out[o.Kind], o)
		}
	}
	return out
}

func one[T any](t *testing.T, objs map[string][]k8sObject, kind string) (k8sObject, T) {
	t.Helper()
	var spec T
	if len(objs[kind]) != 1 {
		t.Fatalf("%d %s objects, want 1", len(objs[kind]), kind)
	}
	o := objs[kind][0]
	if err := o.Spec.Decode(&spec); err != nil {
		t.Fatalf("%s %s: %v", kind, o.Metadata.Name, err)
	}
	return o, spec
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// argRE finds $(VAR) references in container args.
var argRE = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func TestKubernetes(t *testing.T) {
	t.Parallel()
	objs := manifests(t)
	kinds := slices.Sorted(maps.Keys(objs))
	if want := []string{"ConfigMap", "PodDisruptionBudget", "Service", "StatefulSet"}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	sts, ss := one[k8sStatefulSet](t, objs, "StatefulSet")
	podLabels := ss.Template.Metadata.Labels
	if ss.Replicas != 3 || ss.PodManagementPolicy != "Parallel" {
		t.Errorf("StatefulSet replicas %d policy %q, want 3 and Parallel", ss.Replicas, ss.PodManagementPolicy)
	}
	if !subset(ss.Selector.MatchLabels, podLabels) {
		t.Errorf("StatefulSet selector %v does not match its pod labels %v", ss.Selector.MatchLabels, podLabels)
	}
	if ss.Template.Spec.TerminationGracePeriodSeconds < 120 {
		t.Errorf("terminationGracePeriodSeconds %d: the drain needs minutes", ss.Template.Spec.TerminationGracePeriodSeconds)
	}
	if len(ss.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(ss.Template.Spec.Containers))
	}
	c := ss.Template.Spec.Containers[0]
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	wantPorts := map[string]int{
		"client": clientPort, "cluster": routePort, "gateway": gatewayPort, "actor": actorPort,
		"http": httpPort, "monitor": monitorPort, "metrics": metricsPort,
	}
	if !maps.Equal(ports, wantPorts) {
		t.Errorf("container ports %v, want %v", ports, wantPorts)
	}

	// Services select the pods and target declared ports.
	var headless string
	for _, o := range objs["Service"] {
		var s k8sService
		if err := o.Spec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		if !subset(s.Selector, podLabels) {
			t.Errorf("Service %s selector %v does not match the pods %v", o.Metadata.Name, s.Selector, podLabels)
		}
		for _, p := range s.Ports {
			if cp, ok := ports[p.TargetPort]; !ok || cp != p.Port || p.Name != p.TargetPort {
				t.Errorf("Service %s port %s %d → %q: no container port of that name and number", o.Metadata.Name, p.Name, p.Port, p.TargetPort)
			}
		}
		if s.ClusterIP == "None" {
			headless = o.Metadata.Name
			if !s.PublishNotReadyAddresses {
				t.Errorf("headless Service %s must publish not-ready addresses: routes form before any pod is Ready", o.Metadata.Name)
			}
			if !slices.ContainsFunc(s.Ports, func(p k8sServicePort) bool { return p.Name == "cluster" }) {
				t.Errorf("headless Service %s has no cluster port", o.Metadata.Name)
			}
		}
	}
	if headless == "" || ss.ServiceName != headless {
		t.Errorf("StatefulSet serviceName %q, headless Service %q", ss.ServiceName, headless)
	}

	_, pdb := one[k8sPDB](t, objs, "PodDisruptionBudget")
	if pdb.MaxUnavailable != 1 || !subset(pdb.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget maxUnavailable %d selector %v", pdb.MaxUnavailable, pdb.Selector.MatchLabels)
	}

	// Probes: nats-server's /healthz on the monitor port.
	for name, p := range map[string]*k8sProbe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet.Port != "monitor" || !strings.HasPrefix(p.HTTPGet.Path, "/healthz") {
			t.Errorf("%s probe %+v: want httpGet /healthz on port monitor", name, p)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet.Path != "/healthz?js-enabled-only=true" {
		t.Errorf("readiness probe %q", c.ReadinessProbe.HTTPGet.Path)
	}
	if c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
		t.Errorf("no preStop sleep: the Services should drop the pod before the drain starts")
	}

	// Every $(VAR) in the args is a declared env var.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, a := range c.Args {
		for _, m := range argRE.FindAllStringSubmatch(a, -1) {
			if !env[m[1]] {
				t.Errorf("arg %q uses $(%s), which is not in env", a, m[1])
			}
		}
	}

	// Volumes: config from the ConfigMap, data from the claim template.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	cm, _ := one[yaml.Node](t, objs, "ConfigMap")
	var cmVolume string
	for _, v := range ss.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			cmVolume = v.Name
		}
		if _, ok := mounts[v.Name]; !ok {
			t.Errorf("volume %s is not mounted", v.Name)
		}
	}
	if len(ss.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volume claim templates, want 1", len(ss.VolumeClaimTemplates))
	}
	dataMount, ok := mounts[ss.VolumeClaimTemplates[0].Metadata.Name]
	if !ok {
		t.Errorf("the claim template %s is not mounted", ss.VolumeClaimTemplates[0].Metadata.Name)
	}
	configFile := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			configFile = v
		}
	}
	if cmVolume == "" || path.Dir(configFile) != mounts[cmVolume] {
		t.Fatalf("--config=%q is not in the ConfigMap volume (mounted at %q)", configFile, mounts[cmVolume])
	}
	data, ok := cm.Data[path.Base(configFile)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Metadata.Name, path.Base(configFile))
	}

	// The iii YAML in the ConfigMap agrees with the pods.
	ic, err := decodeIII([]byte(data))
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", path.Base(configFile), err)
	}
	flags := argFlags(c.Args)
	ic.Name = flags["name"]
	ic.Cluster.Advertise = flags["cluster-advertise"]
	ic.Actor.Advertise = flags["actor-advertise"]
	if ic.Home != dataMount {
		t.Errorf("home %q is not the data volume %q", ic.Home, dataMount)
	}
	for key, want := range map[string]struct {
		addr string
		port int
	}{
		"listen": {ic.Listen, ports["client"]}, "cluster.listen": {ic.Cluster.Listen, ports["cluster"]},
		"actor.listen": {ic.Actor.Listen, ports["actor"]}, "metrics": {ic.Metrics, ports["metrics"]},
		"http": {deref(ic.HTTP), ports["http"]},
	} {
		if h, _, _ := net.SplitHostPort(want.addr); h != "0.0.0.0" || portOf(want.addr) != want.port {
			t.Errorf("%s %q: want 0.0.0.0:%d (the container port)", key, want.addr, want.port)
		}
	}
	if ic.MonitorPort != ports["monitor"] {
		t.Errorf("monitor_port %d, container port %d", ic.MonitorPort, ports["monitor"])
	}
	if ic.runs("sandbox") {
		t.Errorf("the sandbox worker cannot run in these pods (no user namespaces)")
	}
	var routes []string
	for _, r := range ic.Cluster.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "nats-route" {
			t.Errorf("route %q", r)
			continue
		}
		routes = append(routes, u.Host)
	}
	var want []string
	for i := range ss.Replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s:%d", sts.Metadata.Name, i, headless, ports["cluster"]))
	}
	if !slices.Equal(routes, want) {
		t.Errorf("routes %v, want one per pod %v", routes, want)
	}
	if ic.Replicas != 3 {
		t.Errorf("replicas %d", ic.Replicas)
	}
	// Per pod, as `iii up` would see it: $(POD_NAME) etc. filled in.
	ic.Name = sts.Metadata.Name + "-0"
	ic.Cluster.Advertise = strings.NewReplacer("$(POD_NAME)", ic.Name, "$(POD_NAMESPACE)", "default").Replace(ic.Cluster.Advertise)
	ic.Actor.Advertise = strings.ReplaceAll(ic.Actor.Advertise, "$(POD_IP)", "10.0.0.1")
	checkIII(t, "ConfigMap "+cm.Metadata.Name, ic)
	if want := ic.Name + "." + headless + ".default.svc:" + strconv.Itoa(routePort); ic.Cluster.Advertise != want {
		t.Errorf("cluster advertise %q, want %q", ic.Cluster.Advertise, want)
	}
}

// argFlags maps --flag=value args to flag → value.
func argFlags(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok && strings.HasPrefix(a, "--") {
			out[k] = v
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestDecodeDocs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		kinds []string
		err   bool
	}{
		{in: "", kinds: nil},
		{in: "kind: A\napiVersion: v1\n---\nkind: B\napiVersion: v1\n", kinds: []string{"A", "B"}},
		{in: "---\n---\nkind: A\napiVersion: v1\n", kinds: []string{"A"}},
		{in: "kind: [\n", err: true},
	} {
		docs, err := decodeDocs([]byte(tc.in))
		if (err != nil) != tc.err {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		var kinds []string
		for _, d := range docs {
			kinds = append(kinds, d.Kind)
		}
		if !slices.Equal(kinds, tc.kinds) {
			t.Errorf("%q: kinds %v, want %v", tc.in, kinds, tc.kinds)
		}
	}
}
