package auth

import (
	"fmt"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
)

// BenchmarkGetToken is one auth::get_token round trip over NATS (msgpack),
// answered from the vault (one file read and decode per call) or from the
// environment (the vault is empty), with vault size providers stored.
func BenchmarkGetToken(b *testing.B) {
	for _, bc := range []struct {
		source    string
		providers int
	}{{SourceVault, 1}, {SourceVault, 100}, {SourceEnv, 0}} {
		b.Run(fmt.Sprintf("source=%s,providers=%d", bc.source, bc.providers), func(b *testing.B) {
			f := newFixture(b, newEnv("ANTHROPIC_API_KEY", "sk-env"), nil)
			v := f.store.Vault()
			if bc.source == SourceVault {
				if err := v.Set("anthropic", testKey); err != nil {
					b.Fatal(err)
				}
			}
			for i := 1; i < bc.providers; i++ {
				if err := v.Set(fmt.Sprintf("p%03d", i), testKey); err != nil {
					b.Fatal(err)
				}
			}
			ctx := ctxT(b)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				c, err := engine.Call[*agent.Credential](ctx, f.e, GetTokenFunction, GetTokenRequest{Provider: "anthropic"})
				if err != nil || c == nil {
					b.Fatal(c, err)
				}
			}
		})
	}
}

// BenchmarkVaultSet is one atomic vault write (temp file, fsync, rename,
// fsync of the directory) with providers entries.
func BenchmarkVaultSet(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("providers=%d", n), func(b *testing.B) {
			v, err := OpenVault(vaultPath(b))
			if err != nil {
				b.Fatal(err)
			}
			for i := 1; i < n; i++ {
				if err := v.Set(fmt.Sprintf("p%03d", i), testKey); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := v.Set("anthropic", testKey); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
