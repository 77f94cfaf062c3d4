package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Two auth workers on one home (an `iii up` node and an `iii worker run
// auth` with the same --home) each open the vault. Two Vault values model
// the two processes: flock locks belong to an open file, so two opens in
// one process exclude each other as two processes do, and neither shares
// the other's mutex. Concurrent sets of different providers through both,
// and a replica restarting (OpenVault, which removes leftover temp files)
// meanwhile, must lose no update and fail no write.
func TestVaultSharedByTwoProcesses(t *testing.T) {
	t.Parallel()
	path := vaultPath(t)
	v1, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 8, 20
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := v1
			if w%2 == 1 {
				v = v2
			}
			for i := 0; i < perWriter; i++ {
				if err := v.Set(fmt.Sprintf("p%d-%d", w, i), testKey); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 20; i++ {
			if _, err := OpenVault(path); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	ps, err := v1.Providers()
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != writers*perWriter {
		t.Fatalf("%d of %d credentials survived concurrent sets from two processes", len(ps), writers*perWriter)
	}
	// Deletes through both, interleaved, lose nothing either.
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := v1
			if w%2 == 1 {
				v = v2
			}
			for i := 0; i < perWriter; i += 2 {
				if ok, err := v.Delete(fmt.Sprintf("p%d-%d", w, i)); err != nil || !ok {
					t.Errorf("Delete = %v %v", ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if ps, err = v2.Providers(); err != nil || len(ps) != writers*perWriter/2 {
		t.Fatalf("after concurrent deletes: %d providers, %v; want %d", len(ps), err, writers*perWriter/2)
	}
	names, err := filepath.Glob(filepath.Join(filepath.Dir(path), "*"+tmpInfix+"*"))
	if err != nil || len(names) != 0 {
		t.Fatalf("temp files left: %v %v", names, err)
	}
}

// A set_token that would make the file larger than MaxVaultBytes is
// refused: written, the file would no longer read (ErrCorruptVault), so
// every credential would be unreachable and the worker would refuse to
// start.
func TestVaultSetRefusesOversizedVault(t *testing.T) {
	t.Parallel()
	// '<' is escaped to 6 bytes by encoding/json: the largest entries a
	// valid request makes. Fill the file close to the limit directly (a
	// set per entry rewrites megabytes each time), then set once more.
	big := agent.Credential{Type: agent.CredentialOAuth,
		AccessToken:  strings.Repeat("<", MaxTokenBytes),
		RefreshToken: strings.Repeat("<", MaxTokenBytes)}
	one, err := encodeVault(map[string]agent.Credential{"p000": big})
	if err != nil {
		t.Fatal(err)
	}
	two, err := encodeVault(map[string]agent.Credential{"p000": big, "p001": big})
	if err != nil {
		t.Fatal(err)
	}
	entry := len(two) - len(one)
	m := map[string]agent.Credential{}
	for i := 0; i < 1+(MaxVaultBytes-len(one))/entry; i++ {
		m[fmt.Sprintf("p%03d", i)] = big
	}
	data, err := encodeVault(m)
	if err != nil || len(data) > MaxVaultBytes || len(data)+entry <= MaxVaultBytes {
		t.Fatalf("fill: %d bytes, entry %d, %v", len(data), entry, err)
	}
	path := vaultPath(t)
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := OpenVault(path)
	if err != nil {
		t.Fatal(err)
	}
	refused := v.Set("zzz", big)
	if !errors.Is(refused, ErrVaultFull) {
		t.Fatalf("set past the size limit = %v, want ErrVaultFull", refused)
	}
	// On the wire: invalid_payload, not internal.
	s := newStore(v, options{})
	err = s.SetToken("zzz", big)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeInvalidPayload || !errors.Is(err, ErrVaultFull) {
		t.Fatalf("SetToken past the size limit = %v", err)
	}
	// What was stored before the refusal still reads, in this process and
	// in a new one.
	if ps, err := v.Providers(); err != nil || len(ps) != len(m) {
		t.Fatalf("after the refused set: %d providers, %v; want %d", len(ps), err, len(m))
	}
	if _, err := OpenVault(v.Path()); err != nil {
		t.Fatalf("reopen after the refused set: %v", err)
	}
	// Replacing with a smaller credential still works on a full vault.
	if err := v.Set("p000", testKey); err != nil {
		t.Fatalf("replace with a smaller credential: %v", err)
	}
	if fi, err := os.Stat(v.Path()); err != nil || fi.Size() > MaxVaultBytes {
		t.Fatalf("vault size %v, %v", fi, err)
	}
}
