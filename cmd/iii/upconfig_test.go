package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
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
	} {
		if got := stopBudget(tc.settings); got != tc.want {
			t.Errorf("stopBudget(%v) = %v, want %v", tc.settings, got, tc.want)
		}
	}
}

// --heap-floor-mib: the default, the config file's heap_floor_mib when
// the flag is unset, the flag over the file; a negative floor is refused.
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
// message and answer are 500 KB each ends normally (with the defaults its
// transcript refuses them and the run fails, saying so).
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
			// A failed run fails the command too.
			failed := strings.Contains(out, "could not be stored")
			if (err != nil) == c.ok || failed == c.ok || (c.ok && !strings.Contains(out, long)) {
				t.Fatalf("chat: %v, failed %v\n%.300s", err, failed, out[max(len(out)-300, 0):])
			}
		})
	}
}
