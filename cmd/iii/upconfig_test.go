package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/iii-on-nats/iii/cluster"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

// Every iii config in deploy/ loads with the real loader (unknown keys are
// errors) and makes a valid server configuration.
func TestDeployConfigsLoad(t *testing.T) {
	var files []string
	err := filepath.WalkDir("../../deploy/iii", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
			files = append(files, p)
		}
		return err
	})
	if err != nil || len(files) < 10 {
		t.Fatalf("deploy/iii: %d files, %v", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f), func(t *testing.T) {
			fc, err := loadFileConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			cmd := &cobra.Command{}
			cfg := upConfig{listen: "127.0.0.1:4222", logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			addTopologyFlags(cmd, &cfg.topo)
			for _, name := range []string{"home", "listen", "http", "monitor-port", "metrics", "no-traces", "workers"} {
				cmd.Flags().String(name, "", "")
			}
			var sets []string
			mergeFile(cmd, &cfg, fc, &sets)
			if _, err := parseSettings(sets); err != nil {
				t.Fatal(err)
			}
			if cfg.topo.join != "" {
				return // no embedded server
			}
			host, port, err := splitHostPort(cfg.listen)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cfg.topo.serverConfig(cfg, host, port, t.TempDir()); err != nil {
				t.Fatalf("server config: %v", err)
			}
		})
	}
	if _, err := loadFileConfig(writeTemp(t, "name: n1\nbogus: 1\n")); err == nil {
		t.Fatal("an unknown key loaded")
	}
}

func writeTemp(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "iii.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// --gateways is another spelling of --gateway; both repeat and mix.
func TestGatewaysSpelling(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--gateway", "B=nats://b:7222"}, []string{"B=nats://b:7222"}},
		{[]string{"--gateways", "B=nats://b:7222", "--gateways", "C=nats://c:7222,nats://c2:7222"}, []string{"B=nats://b:7222", "C=nats://c:7222,nats://c2:7222"}},
		{[]string{"--gateway", "B=nats://b:7222", "--gateways", "C=nats://c:7222"}, []string{"B=nats://b:7222", "C=nats://c:7222"}},
	}
	for _, tt := range tests {
		cmd := &cobra.Command{}
		var topo topology
		addTopologyFlags(cmd, &topo)
		if err := cmd.ParseFlags(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if strings.Join(topo.gateways, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%v: gateways %q, want %q", tt.args, topo.gateways, tt.want)
		}
		if _, err := parseGateways(topo.gateways); err != nil {
			t.Errorf("%v: %v", tt.args, err)
		}
	}
}

// A graceful stop gets the orchestrator's drain and then the grace for
// everything else.
func TestStopBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		settings map[string]map[string]string
		want     time.Duration
	}{
		{nil, 25 * time.Second},
		{map[string]map[string]string{"orchestrator": {"drain_timeout": "2m"}}, 2*time.Minute + 15*time.Second},
		{map[string]map[string]string{"orchestrator": {"drain_timeout": "bogus"}}, 25 * time.Second},
		{map[string]map[string]string{"orchestrator": {"drain_timeout": "-1s"}}, 25 * time.Second},
		// The largest duration: the sum saturates rather than wrapping
		// to a negative budget (a stop with no time at all).
		{map[string]map[string]string{"orchestrator": {"drain_timeout": time.Duration(math.MaxInt64).String()}}, math.MaxInt64},
		{map[string]map[string]string{"orchestrator": {"drain_timeout": (time.Duration(math.MaxInt64) - time.Second).String()}}, math.MaxInt64},
	} {
		if got := stopBudget(tc.settings); got != tc.want {
			t.Errorf("stopBudget(%v) = %v, want %v", tc.settings, got, tc.want)
		}
	}
}

// --heap-floor-mib: the default, the config file's heap_floor_mib when
// the flag is unset, the flag over the file; a negative floor, or one past
// a TiB, is refused.
func TestHeapFloorSetting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		args    []string
		want    int
		wantErr bool
	}{
		{name: "default", want: 64},
		{name: "file", file: "heap_floor_mib: 32\n", want: 32},
		{name: "file turns it off", file: "heap_floor_mib: 0\n", want: 0},
		{name: "flag wins", file: "heap_floor_mib: 32\n", args: []string{"--heap-floor-mib", "128"}, want: 128},
		{name: "negative", args: []string{"--heap-floor-mib", "-1"}, want: -1, wantErr: true},
		{name: "largest", args: []string{"--heap-floor-mib", "1048576"}, want: 1 << 20},
		// Shifted into bytes it wrapped around to a floor of 0.
		{name: "past a TiB", args: []string{"--heap-floor-mib", "17592186044416"}, want: 1 << 44, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := &cobra.Command{}
			cfg := upConfig{}
			addHeapFloorFlag(cmd.Flags(), &cfg.heapFloorMiB)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			if tc.file != "" {
				fc, err := loadFileConfig(writeTemp(t, tc.file))
				if err != nil {
					t.Fatal(err)
				}
				var sets []string
				mergeFile(cmd, &cfg, fc, &sets)
			}
			if cfg.heapFloorMiB != tc.want {
				t.Errorf("floor %d MiB, want %d", cfg.heapFloorMiB, tc.want)
			}
			stop, err := startHeapFloor(cfg.heapFloorMiB, slog.New(slog.DiscardHandler))
			if (err != nil) != tc.wantErr {
				t.Fatalf("startHeapFloor(%d): %v", cfg.heapFloorMiB, err)
			}
			if stop != nil {
				stop()
			}
		})
	}
}

// --max-payload (or max_payload in the file) sets the embedded server's
// largest message; the workers' connections see it, and a value the
// server cannot take is refused at start.
func TestMaxPayloadSetting(t *testing.T) {
	a := startTestAppWith(t, upConfig{maxPayload: 4 << 20})
	if got := a.nc.MaxPayload(); got != 4<<20 {
		t.Fatalf("max payload %d, want %d", got, 4<<20)
	}
	cmd := &cobra.Command{}
	cfg := upConfig{}
	cmd.Flags().Int32Var(&cfg.maxPayload, "max-payload", 0, "")
	fc, err := loadFileConfig(writeTemp(t, "max_payload: 8388608\n"))
	if err != nil {
		t.Fatal(err)
	}
	var sets []string
	mergeFile(cmd, &cfg, fc, &sets)
	if cfg.maxPayload != 8<<20 {
		t.Fatalf("max_payload from the file: %d", cfg.maxPayload)
	}
	bad := upConfig{maxPayload: 100 << 20}
	bad.home, bad.listen, bad.logger = t.TempDir(), "127.0.0.1:0", slog.New(slog.DiscardHandler)
	if a, err := startApp(context.Background(), bad); err == nil {
		_ = a.close(context.Background())
		t.Fatal("a max payload of 100 MiB was accepted")
	}
}

// The recipe docs/OPERATIONS.md gives for long model answers works: with
// --max-payload 8 MiB and session.max_entry_size 1 MiB a run whose
// message and answer are 500 KB each ends normally (with the defaults
// run::start refuses the message, saying why).
func TestLongAnswerRecipe(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 500_000/16)
	for _, c := range []struct {
		name string
		cfg  upConfig
		ok   bool
	}{
		{name: "defaults", cfg: upConfig{}, ok: false},
		{name: "raised", cfg: upConfig{maxPayload: 8 << 20, settings: map[string]map[string]string{"session": {"max_entry_size": "1048576"}}}, ok: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := startTestAppWith(t, c.cfg)
			out, err := runIII(t, "chat", "--nats", a.url, "-m", long)
			// A refused or failed run fails the command too.
			failed := strings.Contains(out, "could not be stored") ||
				err != nil && strings.Contains(err.Error(), "quarter of the server's max payload")
			if (err != nil) == c.ok || failed == c.ok || (c.ok && !strings.Contains(out, long)) {
				t.Fatalf("chat: %v, failed %v\n%.300s", err, failed, out[max(len(out)-300, 0):])
			}
		})
	}
}

// The route and gateway passwords come from --X-password-file, else
// III_X_PASSWORD (when a user is set), else the --config file; the user
// from --X-user, else the file. A password is never a flag.
func TestPeerAuthSources(t *testing.T) {
	pwFile := writeTemp(t, "from-flag-file\n")
	fileInline := writeTemp(t, "cluster:\n  name: c1\n  authorization: {user: file-user, password: from-config}\n"+
		"region: c1\ngateway:\n  listen: 127.0.0.1:0\n  authorization: {user: gw, password_file: "+pwFile+"}\n")
	for _, c := range []struct {
		name     string
		args     []string
		env      map[string]string
		want     cluster.Auth // the routes'
		wantGW   cluster.Auth
		wantErr  string
		noConfig bool
	}{
		{name: "flags", args: []string{"--cluster", "c1", "--cluster-user", "u", "--cluster-password-file", pwFile},
			want: cluster.Auth{User: "u", PasswordFile: pwFile}, noConfig: true},
		{name: "env", args: []string{"--cluster", "c1", "--cluster-user", "u"}, env: map[string]string{envClusterPassword: "from-env"},
			want: cluster.Auth{User: "u", Password: "from-env"}, noConfig: true},
		{name: "flag file wins over env", args: []string{"--cluster", "c1", "--cluster-user", "u", "--cluster-password-file", pwFile},
			env: map[string]string{envClusterPassword: "from-env"}, want: cluster.Auth{User: "u", PasswordFile: pwFile}, noConfig: true},
		{name: "env without a user is not used", args: []string{"--cluster", "c1"}, env: map[string]string{envClusterPassword: "from-env"}, noConfig: true},
		{name: "config file", want: cluster.Auth{User: "file-user", Password: "from-config"}, wantGW: cluster.Auth{User: "gw", PasswordFile: pwFile}},
		{name: "env wins over config file", env: map[string]string{envClusterPassword: "from-env", envGatewayPassword: "gw-env"},
			want: cluster.Auth{User: "file-user", Password: "from-env"}, wantGW: cluster.Auth{User: "gw", Password: "gw-env"}},
		{name: "flag user wins over config file", args: []string{"--cluster-user", "flag-user"},
			want: cluster.Auth{User: "flag-user", Password: "from-config"}, wantGW: cluster.Auth{User: "gw", PasswordFile: pwFile}},
		{name: "password file without user", args: []string{"--cluster", "c1", "--cluster-password-file", pwFile}, noConfig: true,
			wantErr: "cluster.authorization.user is required"},
		{name: "user without cluster", args: []string{"--cluster-user", "u"}, noConfig: true, wantErr: "--cluster-user need --cluster NAME"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cmd := &cobra.Command{}
			cfg := upConfig{listen: "127.0.0.1:4222", logger: slog.New(slog.DiscardHandler)}
			addTopologyFlags(cmd, &cfg.topo)
			if err := cmd.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			if !c.noConfig {
				fc, err := loadFileConfig(fileInline)
				if err != nil {
					t.Fatal(err)
				}
				var sets []string
				mergeFile(cmd, &cfg, fc, &sets)
			}
			// Two members, so the cluster settings validate.
			cfg.topo.cluster.Listen = "127.0.0.1:16222"
			cfg.topo.cluster.Routes = []string{"nats-route://127.0.0.1:16222", "nats-route://127.0.0.1:16223"}
			sc, err := cfg.topo.serverConfig(cfg, "127.0.0.1", 4222, t.TempDir())
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sc.Cluster.Authorization != c.want || sc.Gateway.Authorization != c.wantGW {
				t.Fatalf("routes %#v, gateway %#v; want %#v, %#v (passwords %q %q)", sc.Cluster.Authorization, sc.Gateway.Authorization,
					c.want, c.wantGW, sc.Cluster.Authorization.Password, sc.Gateway.Authorization.Password)
			}
		})
	}
}

// `iii up` with gateway authentication from --gateway-user and
// III_GATEWAY_PASSWORD joins a region that requires it (a one-node
// region waits for another one to elect its JetStream meta leader), says
// which user its gateway takes, and prints no password.
func TestUpGatewayAuth(t *testing.T) {
	const secret = "gw-Pw-81xq"
	t.Setenv(envGatewayPassword, secret)
	peer, err := cluster.Start(context.Background(), cluster.Config{
		Name: "r2-1", Port: -1, StoreDir: t.TempDir(), MaxMemory: 32 << 20, MaxStore: 256 << 20, Region: "r2",
		Gateway: cluster.GatewayConfig{Listen: "127.0.0.1:0", Authorization: cluster.Auth{User: "gw", Password: secret}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close(context.Background()) })
	args := []string{"up", "--home", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "", "--workers", "traces",
		"--log-level", "error", "--name", "r1-1", "--region", "r1", "--gateway-listen", "127.0.0.1:0",
		"--gateway", "r2=nats://" + peer.GatewayAddr(), "--gateway-user", "gw"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRootCmd()
	out := &enginetest.Buffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	enginetest.Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("iii up returned %v:\n%s", err, out)
		default:
		}
		if !strings.Contains(out.String(), "Ctrl-C to stop") {
			return fmt.Errorf("not up yet:\n%s", out)
		}
		return nil
	})
	if !strings.Contains(out.String(), "gateway on 127.0.0.1:") || !strings.Contains(out.String(), "(user gw)") {
		t.Fatalf("output does not name the gateway user:\n%s", out)
	}
	if strings.Contains(out.String(), secret) {
		t.Fatalf("output holds the password:\n%s", out)
	}
	if n := peer.Server().NumOutboundGateways(); n != 1 {
		t.Fatalf("r2 has %d outbound gateways, want 1 (to r1)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
