package deploy_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/deploy"
)

// unitFile is a parsed systemd unit or drop-in: section → key → values in
// order. An empty value is an assignment that resets a list (ExecStart=).
type unitFile map[string]map[string][]string

var unitKeyRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// parseUnit reads systemd's INI dialect: [Section] headers, Key=Value
// lines, '#' and ';' comments, lines continued by a trailing backslash.
func parseUnit(data string) (unitFile, error) {
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	lineNo := 0
	var cont strings.Builder
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if cont.Len() == 0 && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if cont.Len() > 0 && line != "" && (line[0] == '#' || line[0] == ';') {
			continue // comments inside a continued line are skipped
		}
		if strings.HasSuffix(line, `\`) {
			cont.WriteString(strings.TrimSuffix(line, `\`))
			cont.WriteByte(' ')
			continue
		}
		if cont.Len() > 0 {
			cont.WriteString(line)
			line = strings.TrimSpace(cont.String())
			cont.Reset()
		}
		if err := u.add(&section, line, lineNo); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cont.Len() > 0 { // a backslash on the last line continues nothing
		if err := u.add(&section, strings.TrimSpace(cont.String()), lineNo); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func (u unitFile) add(section *string, line string, lineNo int) error {
	if line == "" {
		return nil
	}
	if line[0] == '[' {
		if !strings.HasSuffix(line, "]") || len(line) < 3 {
			return fmt.Errorf("line %d: bad section header %q", lineNo, line)
		}
		*section = line[1 : len(line)-1]
		if u[*section] == nil {
			u[*section] = map[string][]string{}
		}
		return nil
	}
	if *section == "" {
		return fmt.Errorf("line %d: %q outside a section", lineNo, line)
	}
	k, v, ok := strings.Cut(line, "=")
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if !ok || !unitKeyRE.MatchString(k) {
		return fmt.Errorf("line %d: %q is not Key=Value", lineNo, line)
	}
	u[*section][k] = append(u[*section][k], v)
	return nil
}

// String writes u back in the same dialect (sections and keys sorted).
func (u unitFile) String() string {
	var b strings.Builder
	for _, s := range slices.Sorted(mapKeys(u)) {
		fmt.Fprintf(&b, "[%s]\n", s)
		for _, k := range slices.Sorted(mapKeys(u[s])) {
			for _, v := range u[s][k] {
				fmt.Fprintf(&b, "%s=%s\n", k, v)
			}
		}
	}
	return b.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// last is a key's effective single value.
func (u unitFile) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// list is a key's effective list: values after the last reset.
func (u unitFile) list(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		if v == "" {
			out = nil
			continue
		}
		out = append(out, v)
	}
	return out
}

func loadUnit(t *testing.T, name string) unitFile {
	t.Helper()
	data, err := fs.ReadFile(deploy.Files, "systemd/"+name)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(string(data))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return u
}

// timespan parses the systemd time spans the units use ("300s", "5min",
// "90").
func timespan(s string) (time.Duration, error) {
	for _, suf := range []struct {
		s string
		d time.Duration
	}{{"min", time.Minute}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"", time.Second}} {
		if n, ok := strings.CutSuffix(s, suf.s); ok {
			v, err := strconv.Atoi(strings.TrimSpace(n))
			if err != nil {
				continue
			}
			return time.Duration(v) * suf.d, nil
		}
	}
	return 0, fmt.Errorf("time span %q", s)
}

func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	breaking := loadUnit(t, "hardening-no-sandbox.conf")["Service"]
	for _, tc := range []struct {
		file      string
		config    string
		home      string
		stateDirs []string
	}{
		{file: "iii.service", config: "/etc/iii/iii.yaml", home: "/var/lib/iii", stateDirs: []string{"iii"}},
		{file: "iii@.service", config: "/etc/iii/%i.yaml", home: "/var/lib/iii/%i", stateDirs: []string{"iii/%i"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			u := loadUnit(t, tc.file)
			if u.last("Unit", "Description") == "" {
				t.Error("no Description")
			}
			for _, k := range []string{"Wants", "After"} {
				if !strings.Contains(u.last("Unit", k), "network-online.target") {
					t.Errorf("%s=%q: the node listens on the network", k, u.last("Unit", k))
				}
			}
			want := map[string]string{
				"Type":            "exec", // no sd_notify in iii
				"Restart":         "on-failure",
				"KillSignal":      "SIGTERM",
				"KillMode":        "mixed",
				"User":            "iii",
				"NoNewPrivileges": "yes",
				"ProtectSystem":   "strict",
			}
			for k, v := range want {
				if got := u.last("Service", k); got != v {
					t.Errorf("%s=%q, want %q", k, got, v)
				}
			}
			stop, err := timespan(u.last("Service", "TimeoutStopSec"))
			if err != nil || stop < 5*time.Minute {
				t.Errorf("TimeoutStopSec=%q: the drain needs minutes (%v)", u.last("Service", "TimeoutStopSec"), err)
			}
			exec := strings.Fields(u.last("Service", "ExecStart"))
			if len(exec) < 2 || exec[0] != "/usr/local/bin/iii" || exec[1] != "up" {
				t.Fatalf("ExecStart=%v", exec)
			}
			flags := argFlags(joinFlagArgs(exec[2:]))
			if flags["config"] != tc.config || flags["home"] != tc.home {
				t.Errorf("ExecStart --config %q --home %q, want %q and %q", flags["config"], flags["home"], tc.config, tc.home)
			}
			if got := u.list("Service", "StateDirectory"); !slices.Equal(got, tc.stateDirs) || "/var/lib/"+got[0] != tc.home {
				t.Errorf("StateDirectory=%v: want %v, the --home folder", got, tc.stateDirs)
			}
			if got := u.last("Service", "ConfigurationDirectory"); "/etc/"+got != path.Dir(tc.config) {
				t.Errorf("ConfigurationDirectory=%q, --config in %s", got, path.Dir(tc.config))
			}
			for _, f := range u.list("Service", "EnvironmentFile") {
				if !strings.HasPrefix(f, "-/etc/iii/") {
					t.Errorf("EnvironmentFile=%q: want an optional file (-) in /etc/iii", f)
				}
			}
			if u.last("Install", "WantedBy") != "multi-user.target" {
				t.Errorf("WantedBy=%q", u.last("Install", "WantedBy"))
			}
			// The base units keep the sandbox worker working: none of the
			// options that break bubblewrap.
			for k := range breaking {
				if _, ok := u["Service"][k]; ok {
					t.Errorf("%s is set: it breaks the sandbox worker (hardening-no-sandbox.conf only)", k)
				}
			}
		})
	}
}

// joinFlagArgs turns "--flag value" pairs into "--flag=value".
func joinFlagArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "--") && !strings.Contains(a, "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			a += "=" + args[i+1]
			i++
		}
		out = append(out, a)
	}
	return out
}

func TestSystemdDropIns(t *testing.T) {
	t.Parallel()
	base := loadUnit(t, "iii.service")
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}

	hard := loadUnit(t, "hardening-no-sandbox.conf")
	if len(hard) != 1 || hard["Service"] == nil {
		t.Errorf("hardening-no-sandbox.conf: want only [Service], got %v", slices.Sorted(mapKeys(hard)))
	}
	for k := range hard["Service"] {
		if !strings.Contains(string(readme), "`"+k) {
			t.Errorf("README.md does not explain %s (hardening-no-sandbox.conf)", k)
		}
	}

	root := loadUnit(t, "sandbox-root.conf")
	if root.last("Service", "User") != "root" {
		t.Errorf("sandbox-root.conf: User=%q", root.last("Service", "User"))
	}
	execs := root["Service"]["ExecStart"]
	if len(execs) != 2 || execs[0] != "" {
		t.Fatalf("sandbox-root.conf: ExecStart %q: want a reset and one command", execs)
	}
	args := joinFlagArgs(strings.Fields(execs[1]))
	baseArgs := joinFlagArgs(strings.Fields(base.last("Service", "ExecStart")))
	var rest []string
	var sandboxRoot string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--set=sandbox.root="); ok {
			sandboxRoot = v
			continue
		}
		rest = append(rest, a)
	}
	if !slices.Equal(rest, baseArgs) {
		t.Errorf("sandbox-root.conf ExecStart %v: want iii.service's %v plus --set sandbox.root=…", rest, baseArgs)
	}
	dirs := root.list("Service", "StateDirectory")
	if sandboxRoot == "" || !slices.Contains(dirs, strings.TrimPrefix(sandboxRoot, "/var/lib/")) {
		t.Errorf("sandbox.root %q is not one of the drop-in's StateDirectory %v (ProtectSystem=strict)", sandboxRoot, dirs)
	}
}

func TestSystemdEnvExample(t *testing.T) {
	t.Parallel()
	data, err := fs.ReadFile(deploy.Files, "systemd/iii.env.example")
	if err != nil {
		t.Fatal(err)
	}
	keyRE := regexp.MustCompile(`^#?[A-Z_][A-Z0-9_]*=`)
	keys := 0
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case keyRE.MatchString(line):
			keys++
		case strings.HasPrefix(line, "#"):
		default:
			t.Errorf("line %d: %q is neither KEY=VALUE nor a comment", i+1, line)
		}
	}
	if keys == 0 {
		t.Error("no variables")
	}
}

func TestDrainBudgetsAgree(t *testing.T) {
	t.Parallel()
	// systemd and Kubernetes give the drain the same time.
	stop, err := timespan(loadUnit(t, "iii.service").last("Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	_, ss := one[k8sStatefulSet](t, manifests(t), "StatefulSet")
	if grace := time.Duration(ss.Template.Spec.TerminationGracePeriodSeconds) * time.Second; grace != stop {
		t.Errorf("terminationGracePeriodSeconds %v, TimeoutStopSec %v", grace, stop)
	}
}

func TestParseUnit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     unitFile
		err      bool
	}{
		{name: "empty", in: "", want: unitFile{}},
		{name: "basic", in: "# c\n; c\n[A]\nK = v \nK=w\n[B]\nX=\n", want: unitFile{"A": {"K": {"v", "w"}}, "B": {"X": {""}}}},
		{name: "continued", in: "[S]\nExecStart=/bin/a \\\n  # skipped\n  --b\n", want: unitFile{"S": {"ExecStart": {"/bin/a  --b"}}}},
		{name: "backslash at end", in: "[S]\nK=v\\", want: unitFile{"S": {"K": {"v"}}}},
		{name: "value with =", in: "[S]\nEnvironment=A=b\n", want: unitFile{"S": {"Environment": {"A=b"}}}},
		{name: "outside section", in: "K=v\n", err: true},
		{name: "no equals", in: "[S]\nK\n", err: true},
		{name: "bad header", in: "[S\n", err: true},
		{name: "bad key", in: "[S]\n K x=v\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseUnit(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err %v", err)
			}
			if !tc.err && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTimespan(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"300s": 300 * time.Second, "5min": 5 * time.Minute, "90": 90 * time.Second, "500ms": 500 * time.Millisecond} {
		if got, err := timespan(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	if _, err := timespan("soon"); err == nil {
		t.Error("parsed \"soon\"")
	}
}

func FuzzParseUnit(f *testing.F) {
	for _, name := range []string{"iii.service", "iii@.service", "hardening-no-sandbox.conf", "sandbox-root.conf"} {
		data, err := fs.ReadFile(deploy.Files, "systemd/"+name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	f.Add("[S]\nK=a \\\n b\\")
	f.Fuzz(func(t *testing.T, in string) {
		u, err := parseUnit(in)
		if err != nil {
			return
		}
		// What parses writes back and parses to the same thing.
		again, err := parseUnit(u.String())
		if err != nil {
			t.Fatalf("re-parse of %q: %v", u.String(), err)
		}
		if !reflect.DeepEqual(u, again) {
			t.Fatalf("round trip: %v → %q → %v", u, u.String(), again)
		}
	})
}
