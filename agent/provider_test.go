package agent

import (
	"fmt"
	"strings"
	"testing"
)

func TestToolNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70)
	tn := NewToolNames([]string{"math::add", "math__add", "fs::read.file", long + "::a", long + "::b", "math::add"})
	seen := map[string]bool{}
	for id, name := range tn.ByID {
		if seen[name] {
			t.Fatalf("name %q used twice", name)
		}
		seen[name] = true
		if len(name) > 64 || name == "" {
			t.Fatalf("name %q of %q has a bad length", name, id)
		}
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				t.Fatalf("name %q has %q", name, c)
			}
		}
		if tn.FunctionID(name) != id {
			t.Fatalf("%q → %q → %q", id, name, tn.FunctionID(name))
		}
	}
	if tn.Name("math::add") != "math__add" || tn.FunctionID("other__fn") != "other::fn" || tn.Name("a::b") != "a__b" {
		t.Fatalf("names: %v", tn.ByID)
	}
}

func FuzzToolName(f *testing.F) {
	f.Add("math::add", "math__add")
	f.Fuzz(func(t *testing.T, a, b string) {
		tn := NewToolNames([]string{a, b})
		for id, name := range tn.ByID {
			if got := tn.FunctionID(name); got != id {
				t.Fatalf("%q → %q → %q", id, name, got)
			}
		}
	})
}

func TestPricingCost(t *testing.T) {
	t.Parallel()
	p := Pricing{InputPer1M: 3, OutputPer1M: 15, CacheReadPer1M: 0.3, CacheWritePer1M: 3.75}
	got := p.Cost(Usage{InputTokens: 1_000_000, OutputTokens: 100_000, CacheReadTokens: 1_000_000, CacheWriteTokens: 0})
	if fmt.Sprintf("%.4f", got) != "4.8000" {
		t.Fatalf("cost %v", got)
	}
	if (Pricing{InputPer1M: 1}).Cost(Usage{CacheReadTokens: 1e6}) != 1 {
		t.Fatal("cache reads without a cache price are not priced as input")
	}
	// Negative counts (a foreign usage) count as none: no refund.
	if got := p.Cost(Usage{InputTokens: -1_000_000, OutputTokens: 100_000, CacheReadTokens: -5, CacheWriteTokens: -1}); fmt.Sprintf("%.4f", got) != "1.5000" {
		t.Fatalf("cost of negative counts %v", got)
	}
	c := Credential{Type: CredentialAPIKey, Key: "sk-secret"}
	if s := fmt.Sprintf("%v %+v %#v %s", c, c, c, c); strings.Contains(s, "sk-secret") {
		t.Fatalf("credential printed: %s", s)
	}
}
