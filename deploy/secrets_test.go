package deploy_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// readmeCommands returns the commands of deploy/README.md's sh blocks,
// continuation lines joined and comments dropped.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in, cur := false, ""
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case !in:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if c, ok := strings.CutSuffix(strings.TrimSpace(line), `\`); ok {
			cur += c + " "
			continue
		}
		if c := strings.TrimSpace(cur + line); c != "" {
			cmds = append(cmds, c)
		}
		cur = ""
	}
	return cmds
}

// installed finds README's `install` command that creates dst and
// returns its mode, owner and group ("" when not given), and whether it
// is guarded with "test -e dst ||" (a second run of the recipe keeps the
// file, and the secret written into it, instead of emptying it).
func installed(cmds []string, dst string) (mode uint64, owner, group string, guarded, ok bool) {
	for _, c := range cmds {
		guard, c, _ := strings.Cut(c, "||")
		if !strings.Contains(c, "install") {
			c, guard = guard, ""
		}
		guarded = strings.Join(strings.Fields(guard), " ") == "test -e "+dst
		f := strings.Fields(c)
		if len(f) < 3 || f[0] != "install" || f[len(f)-1] != dst || slices.Contains(f, "-d") {
			continue
		}
		mode = 0o755 // install's default
		for i := 1; i+1 < len(f); i++ {
			switch f[i] {
			case "-m":
				mode, _ = strconv.ParseUint(f[i+1], 8, 32)
			case "-o":
				owner = f[i+1]
			case "-g":
				group = f[i+1]
			}
		}
		return mode, owner, group, guarded, true
	}
	return 0, "", "", false, false
}

// TestREADMEInstallsPasswordFiles: every password file an iii YAML of this
// folder names under /etc/iii is created by the systemd recipe, readable
// by the unit's user iii (which reads it at start) and by no one else,
// and kept when the recipe runs again. The guide said "mode 0600" and
// created none: a root-owned 0600 file fails the start with "permission
// denied".
func TestREADMEInstallsPasswordFiles(t *testing.T) {
	t.Parallel()
	cmds := readmeCommands(t)
	unit := loadUnit(t, "iii.service")
	user, group := unit.last("Service", "User"), unit.last("Service", "Group")
	files := map[string]string{}
	for _, p := range glob(t, "iii/*/*.yaml") {
		c := loadIII(t, p)
		for _, f := range []string{c.Cluster.Authorization.PasswordFile, c.Gateway.Authorization.PasswordFile} {
			if strings.HasPrefix(f, "/etc/iii/") {
				files[f] = p
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("no iii YAML names a password file under /etc/iii")
	}
	for f, p := range files {
		mode, owner, grp, guarded, ok := installed(cmds, f)
		if !ok {
			t.Errorf("%s names %s, which no install command of README.md creates", p, f)
			continue
		}
		if !guarded {
			t.Errorf("README.md installs %s unguarded: a second run empties the password (want \"test -e %s || install ...\")", f, f)
		}
		readable := owner == user && mode&0o400 != 0 || grp == group && mode&0o040 != 0
		if !readable || mode&0o007 != 0 {
			t.Errorf("README.md installs %s mode %04o owner %q group %q: want it readable by user %s (group %s) and not by others",
				f, mode, owner, grp, user, group)
		}
	}
}

// TestREADMECreatesKubernetesSecrets: every Secret the StatefulSet needs
// (a volume or envFrom that is not optional) is created by the guide's
// kubectl commands, with the keys the pods read from it. The guide created
// iii-provider-keys (optional) but not iii-peer-auth, so pods that
// followed it never left ContainerCreating.
func TestREADMECreatesKubernetesSecrets(t *testing.T) {
	t.Parallel()
	var spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					EnvFrom []struct {
						SecretRef *struct {
							Name     string `yaml:"name"`
							Optional bool   `yaml:"optional"`
						} `yaml:"secretRef"`
					} `yaml:"envFrom"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name   string `yaml:"name"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
						Optional   bool   `yaml:"optional"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	}
	objs := manifests(t)
	sts, _ := one[k8sStatefulSet](t, objs, "StatefulSet")
	if err := sts.Spec.Decode(&spec); err != nil {
		t.Fatal(err)
	}
	// The ConfigMap's iii.yaml names the files the pods read.
	if len(objs["ConfigMap"]) != 1 {
		t.Fatalf("%d ConfigMaps, want 1", len(objs["ConfigMap"]))
	}
	cm := objs["ConfigMap"][0]
	var node struct {
		Cluster struct {
			Authorization struct {
				PasswordFile string `yaml:"password_file"`
			} `yaml:"authorization"`
		} `yaml:"cluster"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["iii.yaml"]), &node); err != nil {
		t.Fatal(err)
	}
	needed := map[string][]string{} // secret → keys read from it
	mounts := map[string]string{}   // volume → mount path
	for _, c := range spec.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil && !e.SecretRef.Optional {
				needed[e.SecretRef.Name] = nil
			}
		}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
	}
	for _, v := range spec.Template.Spec.Volumes {
		if v.Secret == nil || v.Secret.Optional {
			continue
		}
		keys := needed[v.Secret.SecretName]
		if dir, ok := mounts[v.Name]; ok {
			if f, ok := strings.CutPrefix(node.Cluster.Authorization.PasswordFile, dir+"/"); ok {
				keys = append(keys, f)
			}
		}
		needed[v.Secret.SecretName] = keys
	}
	if len(needed) == 0 {
		t.Fatal("the StatefulSet needs no Secret: the test looks at the wrong fields")
	}
	cmds := readmeCommands(t)
	for name, keys := range needed {
		var create string
		for _, c := range cmds {
			if f := strings.Fields(c); len(f) >= 5 && strings.Join(f[:4], " ") == "kubectl create secret generic" && f[4] == name {
				create = c
			}
		}
		if create == "" {
			t.Errorf("the StatefulSet needs Secret %s, which no kubectl command of README.md creates", name)
			continue
		}
		for _, k := range keys {
			if !strings.Contains(create, "--from-file="+k) && !strings.Contains(create, "--from-literal="+k+"=") {
				t.Errorf("README.md creates Secret %s without key %s (%s)", name, k, create)
			}
		}
	}
}
