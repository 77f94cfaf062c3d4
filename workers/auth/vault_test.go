package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/iii-on-nats/iii/agent"
)

var testKey = agent.Credential{Type: agent.CredentialAPIKey, Key: "sk-test-0001"}

func TestVaultCreate(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	v, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := mode(t, filepath.Dir(path)); got != 0o700 {
		t.Fatalf("vault dir mode %04o, want 0700", got)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("opening created the file: %v", err)
	}
	if m, err := v.All(); err != nil || len(m) != 0 {
		t.Fatalf("new vault = %v, %v; want empty", m, err)
	}
	if err := v.Set("anthropic", testKey); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, path); got != 0o600 {
		t.Fatalf("vault file mode %04o, want 0600", got)
	}
	c, ok, err := v.Get("anthropic")
	if err != nil || !ok || c != testKey {
		t.Fatalf("Get = %v %v %v", c, ok, err)
	}
	// A second open reads what the first wrote.
	v2, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := v2.Providers(); err != nil || strings.Join(ps, ",") != "anthropic" {
		t.Fatalf("Providers = %v, %v", ps, err)
	}
	if v2.Path() != path {
		t.Fatalf("Path = %q, want %q", v2.Path(), path)
	}
}

func TestVaultRefusesOpenModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fileMode os.FileMode // 0: no file
		dirMode  os.FileMode
	}{
		{"file 0644", 0o644, 0o700},
		{"file 0640", 0o640, 0o700},
		{"file 0604", 0o604, 0o700},
		{"file 0700 (exec)", 0o700, 0o700},
		{"file 0666", 0o666, 0o700},
		{"dir 0755", 0, 0o755},
		{"dir 0750", 0, 0o750},
		{"dir 0701", 0o600, 0o701},
		{"dir 0777 with good file", 0o600, 0o777},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := vaultPath(t)
			dir := filepath.Dir(path)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.fileMode != 0 {
				if err := os.WriteFile(path, []byte(`{"version":1,"credentials":{}}`), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.fileMode); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(dir, tt.dirMode); err != nil {
				t.Fatal(err)
			}
			_, err := OpenVault(path)
			if !errors.Is(err, ErrInsecureVault) {
				t.Fatalf("OpenVault = %v, want ErrInsecureVault", err)
			}
			if !strings.Contains(err.Error(), "chmod") {
				t.Fatalf("error %q does not say how to fix it", err)
			}
		})
	}
}

func TestVaultNarrowerModesAccepted(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"version":1,"credentials":{}}`), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	if _, err := OpenVault(path); err != nil {
		t.Fatalf("0400 file in 0500 dir refused: %v", err)
	}
}

// A vault loosened after it opened is refused at the next call, and set
// does not write through it.
func TestVaultRechecksModes(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	v, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Set("p", testKey); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Get("p"); !errors.Is(err, ErrInsecureVault) {
		t.Fatalf("Get on 0644 = %v", err)
	}
	if err := v.Set("q", testKey); !errors.Is(err, ErrInsecureVault) {
		t.Fatalf("Set on 0644 = %v", err)
	}
	if got := mode(t, path); got != 0o644 {
		t.Fatalf("Set replaced the refused file (mode %04o)", got)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Delete("p"); !errors.Is(err, ErrInsecureVault) {
		t.Fatalf("Delete in 0755 dir = %v", err)
	}
}

func TestVaultRefusesNonRegular(t *testing.T) {
	t.Parallel()
	t.Run("symlink", func(t *testing.T) {
		t.Parallel()
		path := vaultPath(t)
		dir := filepath.Dir(path)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "real.json")
		if err := os.WriteFile(target, []byte(`{"version":1,"credentials":{}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenVault(path); !errors.Is(err, ErrInsecureVault) {
			t.Fatalf("symlink vault = %v", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		path := vaultPath(t)
		if err := os.MkdirAll(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenVault(path); !errors.Is(err, ErrInsecureVault) {
			t.Fatalf("directory vault = %v", err)
		}
	})
	t.Run("dir is a file", func(t *testing.T) {
		t.Parallel()
		path := vaultPath(t)
		if err := os.WriteFile(filepath.Dir(path), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenVault(path); err == nil {
			t.Fatal("vault under a file opened")
		}
	})
}

func TestVaultCorrupt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content string
	}{
		{"syntax", `{"version":1,"credentials":{`},
		{"not an object", `[1,2]`},
		{"wrong type", `{"version":"1","credentials":{}}`},
		{"no version", `{"credentials":{}}`},
		{"future version", `{"version":2,"credentials":{}}`},
		{"unknown field", `{"version":1,"credentials":{},"extra":true}`},
		{"unknown credential field", `{"version":1,"credentials":{"p":{"type":"api_key","key":"k","scope":"x"}}}`},
		{"invalid credential", `{"version":1,"credentials":{"p":{"type":"api_key","key":"k k"}}}`},
		{"unknown type", `{"version":1,"credentials":{"p":{"type":"magic"}}}`},
		{"invalid provider", `{"version":1,"credentials":{"a.b":{"type":"api_key","key":"k"}}}`},
		{"trailing data", `{"version":1,"credentials":{}} {}`},
		{"trailing bracket", `{"version":1,"credentials":{}}}garbage`},
		{"binary", "\x00\xff\xfe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := vaultPath(t)
			if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenVault(path); !errors.Is(err, ErrCorruptVault) {
				t.Fatalf("OpenVault = %v, want ErrCorruptVault", err)
			}
		})
	}
}

// A vault that turns corrupt after it opened is never replaced by a write.
func TestVaultCorruptNeverReplaced(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	v, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Set("p", testKey); err != nil {
		t.Fatal(err)
	}
	bad := []byte(`{"version":1,"credentials":{"p":{"type":"api_key","key":"sk-test-0001"}` + "\n")
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.Set("q", testKey); !errors.Is(err, ErrCorruptVault) {
		t.Fatalf("Set on corrupt vault = %v", err)
	}
	if _, err := v.Delete("p"); !errors.Is(err, ErrCorruptVault) {
		t.Fatalf("Delete on corrupt vault = %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != string(bad) {
		t.Fatalf("corrupt vault changed: %q, %v", got, err)
	}
}

func TestVaultEmptyFileIsEmpty(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := v.All(); err != nil || len(m) != 0 {
		t.Fatalf("blank vault = %v, %v", m, err)
	}
}

func TestVaultTooLarge(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	big := `{"version":1,"credentials":{}}` + strings.Repeat(" ", MaxVaultBytes)
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenVault(path); !errors.Is(err, ErrCorruptVault) {
		t.Fatalf("oversized vault = %v", err)
	}
}

// A temp file a crashed write left behind is ignored by reads and removed
// when the vault opens; writes leave none.
func TestVaultAtomicWrite(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	v, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Set("p", testKey); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	// The crash: a half-written temp file, and an unrelated file that must
	// survive the cleanup.
	leftover := filepath.Join(dir, VaultFile+tmpInfix+"123456")
	if err := os.WriteFile(leftover, []byte(`{"version":1,"credentials":{"p":`), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, ok, err := v.Get("p"); err != nil || !ok || c != testKey {
		t.Fatalf("Get with a leftover temp file = %v %v %v", c, ok, err)
	}
	v2, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover temp file not removed: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("unrelated file removed: %v", err)
	}
	for i := 0; i < 5; i++ {
		if err := v2.Set("p", testKey); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v2.Delete("p"); err != nil {
		t.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*"+tmpInfix+"*"))
	if err != nil || len(names) != 0 {
		t.Fatalf("writes left temp files: %v %v", names, err)
	}
}

func TestVaultDelete(t *testing.T) {
	t.Parallel()
	v, err := OpenVault(vaultPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := v.Delete("p"); err != nil || ok {
		t.Fatalf("Delete absent = %v %v", ok, err)
	}
	if _, err := os.Stat(v.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleting an absent entry wrote the file: %v", err)
	}
	if err := v.Set("p", testKey); err != nil {
		t.Fatal(err)
	}
	if ok, err := v.Delete("p"); err != nil || !ok {
		t.Fatalf("Delete present = %v %v", ok, err)
	}
	if _, ok, _ := v.Get("p"); ok {
		t.Fatal("deleted credential still there")
	}
	if _, err := v.Delete("a b"); !errors.Is(err, ErrInvalidProvider) {
		t.Fatalf("Delete bad provider = %v", err)
	}
	if err := v.Set("a b", testKey); !errors.Is(err, ErrInvalidProvider) {
		t.Fatalf("Set bad provider = %v", err)
	}
	if err := v.Set("p", agent.Credential{Type: "x"}); !errors.Is(err, ErrInvalidCredential) {
		t.Fatalf("Set bad credential = %v", err)
	}
}

func TestVaultConcurrentSet(t *testing.T) {
	t.Parallel()
	v, err := OpenVault(vaultPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := string(rune('a' + i))
			if err := v.Set(p, testKey); err != nil {
				t.Error(err)
			}
			if _, _, err := v.Get(p); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	v2, err := OpenVault(v.Path())
	if err != nil {
		t.Fatal(err)
	}
	if ps, err := v2.Providers(); err != nil || len(ps) != 16 {
		t.Fatalf("after 16 concurrent sets: %v, %v", ps, err)
	}
}

func TestVaultFileFormat(t *testing.T) {
	t.Parallel()
	v, err := OpenVault(vaultPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Set("openai", testKey); err != nil {
		t.Fatal(err)
	}
	if err := v.Set("corp", agent.Credential{Type: agent.CredentialOAuth, AccessToken: "at", RefreshToken: "rt", ExpiresAt: 5}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(v.Path())
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 1,
  "credentials": {
    "corp": {
      "type": "oauth",
      "access_token": "at",
      "refresh_token": "rt",
      "expires_at": 5
    },
    "openai": {
      "type": "api_key",
      "key": "sk-test-0001"
    }
  }
}
`
	if string(got) != want {
		t.Fatalf("vault file:\n%s\nwant:\n%s", got, want)
	}
}
