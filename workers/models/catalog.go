package models

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

// Bounds of a catalog.
const (
	// MaxModelIDLen bounds a model id and an alias in bytes.
	MaxModelIDLen = 256
	// MaxDisplayNameLen bounds a display name in bytes.
	MaxDisplayNameLen = 256
	// MaxAliases bounds the aliases of one entry.
	MaxAliases = 16
	// MaxCatalogEntries bounds the entries of one catalog file.
	MaxCatalogEntries = 4096
	// MaxCatalogFileBytes bounds the size of a catalog file.
	MaxCatalogFileBytes = 4 << 20
	// MaxPricePer1M bounds every price, in USD per million tokens ($1 a
	// token, far above any model's): at most this, the cost of any usage
	// (int64 token counts) is a finite number, where a price such as 1e300
	// made it +Inf, which no budget can subtract and JSON cannot carry.
	MaxPricePer1M = 1e6
)

//go:embed catalog.json
var embeddedJSON []byte

// embedded is the parsed embedded catalog; a test keeps it valid.
var embedded = func() []Entry {
	entries, err := ParseCatalog(embeddedJSON)
	if err != nil {
		panic(fmt.Sprintf("models: embedded catalog.json: %v", err))
	}
	return entries
}()

// Entry is one model of a catalog file: an agent.Model and the other names
// the provider accepts for it (an undated alias of a dated id, say).
type Entry struct {
	agent.Model
	// Aliases resolve to the entry in models::get and models::supports.
	Aliases []string `json:"aliases,omitempty"`
}

// catalogFile is the JSON document of catalog.json and of an override
// file: {"comment"?: "...", "models": [Entry...]}.
type catalogFile struct {
	Comment string            `json:"comment,omitempty"`
	Models  []json.RawMessage `json:"models"`
}

// Embedded returns a copy of the catalog compiled into the binary
// (catalog.json): current Anthropic and OpenAI models and the scripted
// provider's offline "echo".
func Embedded() []Entry { return cloneEntries(embedded) }

// ParseCatalog parses a catalog file and checks every entry
// ([ValidateEntry]) and that ids and aliases are unique per provider.
// Unknown fields are errors, so a typo in a price name never passes
// silently. Every error wraps [ErrInvalidCatalog].
func ParseCatalog(data []byte) ([]Entry, error) {
	raws, err := parseFile(data)
	if err != nil {
		return nil, err
	}
	entries := make([]Entry, 0, len(raws))
	for i, raw := range raws {
		var e Entry
		if err := strictUnmarshal(raw, &e); err != nil {
			return nil, catalogErr("models[%d]: %v", i, err)
		}
		entries = append(entries, e)
	}
	if err := ValidateCatalog(entries); err != nil {
		return nil, err
	}
	return entries, nil
}

// ApplyOverrides applies an override file (the format of catalog.json) to
// base and returns the result; base is not modified. An override entry
// names a model by provider and id (or one of its aliases): the fields it
// gives replace the base entry's and the others are kept (aliases, when
// given, replace the list, and a name dropped from it is free for a later
// entry of the file); an entry for a model base lacks is added and must
// be complete. The result is checked like [ParseCatalog]'s. Every
// error wraps [ErrInvalidCatalog].
func ApplyOverrides(base []Entry, data []byte) ([]Entry, error) {
	raws, err := parseFile(data)
	if err != nil {
		return nil, err
	}
	out := cloneEntries(base)
	index := map[nameK]int{}
	for i, e := range out {
		for _, name := range names(e) {
			index[nameKey(e.Provider, name)] = i
		}
	}
	for i, raw := range raws {
		var head struct {
			Provider string `json:"provider"`
			ID       string `json:"id"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, catalogErr("models[%d]: %v", i, err)
		}
		if err := agent.ValidateID("provider", head.Provider); err != nil {
			return nil, catalogErr("models[%d]: %v", i, err)
		}
		if err := ValidateModelID(head.ID); err != nil {
			return nil, catalogErr("models[%d]: %v", i, err)
		}
		if at, ok := index[nameKey(head.Provider, head.ID)]; ok {
			e := cloneEntry(out[at])
			// Decoding onto a copy keeps every field the override omits.
			if err := strictUnmarshal(raw, &e); err != nil {
				return nil, catalogErr("models[%d] (%s %s): %v", i, head.Provider, head.ID, err)
			}
			if e.ID != out[at].ID {
				// Named by an alias: the override's id is that alias, the
				// entry keeps its own.
				e.ID = out[at].ID
			}
			// The entry's old names are free unless it keeps them: an
			// alias the override drops may name a model a later entry
			// adds.
			for _, name := range names(out[at]) {
				if index[nameKey(e.Provider, name)] == at {
					delete(index, nameKey(e.Provider, name))
				}
			}
			out[at] = e
			for _, name := range names(e) {
				if _, taken := index[nameKey(e.Provider, name)]; !taken {
					index[nameKey(e.Provider, name)] = at
				}
			}
			continue
		}
		var e Entry
		if err := strictUnmarshal(raw, &e); err != nil {
			return nil, catalogErr("models[%d] (%s %s): %v", i, head.Provider, head.ID, err)
		}
		out = append(out, e)
		for _, name := range names(e) {
			if _, dup := index[nameKey(e.Provider, name)]; !dup {
				index[nameKey(e.Provider, name)] = len(out) - 1
			}
		}
	}
	if err := ValidateCatalog(out); err != nil {
		return nil, err
	}
	return out, nil
}

// parseFile reads the document around the entries.
func parseFile(data []byte) ([]json.RawMessage, error) {
	if len(data) > MaxCatalogFileBytes {
		return nil, catalogErr("file is %d bytes, larger than %d", len(data), MaxCatalogFileBytes)
	}
	var f catalogFile
	if err := strictUnmarshal(data, &f); err != nil {
		return nil, catalogErr("%v", err)
	}
	if f.Models == nil {
		return nil, catalogErr(`no "models" list`)
	}
	if len(f.Models) > MaxCatalogEntries {
		return nil, catalogErr("%d models, more than %d", len(f.Models), MaxCatalogEntries)
	}
	return f.Models, nil
}

// strictUnmarshal decodes one JSON value, refusing unknown fields and
// trailing data.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// ValidateCatalog checks every entry ([ValidateEntry]) and that no two
// entries of a provider share an id or an alias. Every error wraps
// [ErrInvalidCatalog].
func ValidateCatalog(entries []Entry) error {
	if len(entries) > MaxCatalogEntries {
		return catalogErr("%d models, more than %d", len(entries), MaxCatalogEntries)
	}
	seen := make(map[nameK]string, len(entries))
	for i, e := range entries {
		if err := ValidateEntry(e); err != nil {
			return catalogErr("models[%d]: %v", i, err)
		}
		for _, name := range names(e) {
			k := nameKey(e.Provider, name)
			if owner, dup := seen[k]; dup {
				return catalogErr("models[%d]: %s name %q is already taken by %q", i, e.Provider, name, owner)
			}
			seen[k] = e.ID
		}
	}
	return nil
}

// ValidateEntry checks one catalog entry: provider an id
// (agent.ValidateID), id and aliases model ids ([ValidateModelID]), a
// display name of at most [MaxDisplayNameLen] bytes of printable UTF-8, a
// positive context window and max output (the latter at most the former),
// and prices from 0 to [MaxPricePer1M].
func ValidateEntry(e Entry) error {
	if err := agent.ValidateID("provider", e.Provider); err != nil {
		return err
	}
	if err := ValidateModelID(e.ID); err != nil {
		return err
	}
	if err := validDisplayName(e.DisplayName); err != nil {
		return fmt.Errorf("%s %s: %w", e.Provider, e.ID, err)
	}
	if e.ContextWindow <= 0 {
		return fmt.Errorf("%s %s: context_window %d is not positive", e.Provider, e.ID, e.ContextWindow)
	}
	if e.MaxOutputTokens <= 0 {
		return fmt.Errorf("%s %s: max_output_tokens %d is not positive", e.Provider, e.ID, e.MaxOutputTokens)
	}
	if e.MaxOutputTokens > e.ContextWindow {
		return fmt.Errorf("%s %s: max_output_tokens %d exceeds context_window %d", e.Provider, e.ID, e.MaxOutputTokens, e.ContextWindow)
	}
	if err := validPricing(e.Pricing); err != nil {
		return fmt.Errorf("%s %s: %w", e.Provider, e.ID, err)
	}
	if len(e.Aliases) > MaxAliases {
		return fmt.Errorf("%s %s: %d aliases, more than %d", e.Provider, e.ID, len(e.Aliases), MaxAliases)
	}
	for _, a := range e.Aliases {
		if err := ValidateModelID(a); err != nil {
			return fmt.Errorf("%s %s: alias: %w", e.Provider, e.ID, err)
		}
		if a == e.ID {
			return fmt.Errorf("%s %s: alias %q repeats the id", e.Provider, e.ID, a)
		}
	}
	return nil
}

func validPricing(p agent.Pricing) error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"input_per_1m", p.InputPer1M},
		{"output_per_1m", p.OutputPer1M},
		{"cache_read_per_1m", p.CacheReadPer1M},
		{"cache_write_per_1m", p.CacheWritePer1M},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v > MaxPricePer1M {
			return fmt.Errorf("pricing.%s %v is not a price from 0 to %v", f.name, f.v, MaxPricePer1M)
		}
	}
	return nil
}

// ValidateModelID checks a model id or alias: 1 to [MaxModelIDLen] bytes of
// valid UTF-8 with no whitespace or control character, and no empty
// '/'-separated segment (so every id maps onto a KV key through
// subjects.KVKey). Errors wrap [ErrInvalidModelID].
func ValidateModelID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: model id is empty", ErrInvalidModelID)
	}
	if len(id) > MaxModelIDLen {
		return fmt.Errorf("%w: model id is longer than %d bytes", ErrInvalidModelID, MaxModelIDLen)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: model id is not valid UTF-8", ErrInvalidModelID)
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: model id %.80q contains whitespace or a control character", ErrInvalidModelID, id)
		}
	}
	if strings.HasPrefix(id, "/") || strings.HasSuffix(id, "/") || strings.Contains(id, "//") {
		return fmt.Errorf("%w: model id %.80q has an empty '/' segment", ErrInvalidModelID, id)
	}
	return nil
}

// validDisplayName: empty, or at most MaxDisplayNameLen bytes of UTF-8
// without control characters.
func validDisplayName(s string) error {
	if len(s) > MaxDisplayNameLen {
		return fmt.Errorf("display_name is longer than %d bytes", MaxDisplayNameLen)
	}
	if !utf8.ValidString(s) {
		return errors.New("display_name is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("display_name %.80q contains a control character", s)
		}
	}
	return nil
}

// recordKey is the ModelsBucket key of model id of provider:
// "<provider>.<subjects.KVKey(id)>".
func recordKey(provider, id string) (string, error) {
	if err := agent.ValidateID("provider", provider); err != nil {
		return "", err
	}
	if err := ValidateModelID(id); err != nil {
		return "", err
	}
	k, err := subjects.KVKey(id)
	if err != nil {
		return "", err
	}
	return provider + "." + k, nil
}

// names are the id and the aliases of e.
func names(e Entry) []string {
	return append([]string{e.ID}, e.Aliases...)
}

// nameK is a model name (id or alias) within its provider.
type nameK struct{ provider, name string }

func nameKey(provider, name string) nameK { return nameK{provider, name} }

func cloneEntry(e Entry) Entry {
	e.Aliases = slices.Clone(e.Aliases)
	return e
}

func cloneEntries(in []Entry) []Entry {
	out := make([]Entry, len(in))
	for i, e := range in {
		out[i] = cloneEntry(e)
	}
	return out
}
