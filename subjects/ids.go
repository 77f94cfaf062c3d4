package subjects

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDLen bounds session ids, call ids and queue, topic and scope names.
const MaxIDLen = 128

// ValidateID checks a caller-supplied id that becomes one subject or key
// token: 1 to [MaxIDLen] characters of [A-Za-z0-9_-]. kind names the id in
// the error ("session_id").
func ValidateID(kind, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidID, kind)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s is longer than %d characters", ErrInvalidID, kind, MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !plain(id[i]) {
			return fmt.Errorf("%w: %s %q may only contain A-Z a-z 0-9 _ -", ErrInvalidID, kind, id)
		}
	}
	return nil
}

// MaxKeyLen bounds a state key in bytes before escaping.
const MaxKeyLen = 512

const keyEscape = '='

// ValidateKey checks a state key: 1 to [MaxKeyLen] bytes of valid UTF-8 with
// no control characters, and no empty '/'-separated segment.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidKey, MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q contains a control character", ErrInvalidKey, key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" {
			return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, key)
		}
	}
	return nil
}

// KVKey maps a key with '/'-separated segments onto a JetStream KV key:
// segments become '.'-separated tokens, and bytes outside [A-Za-z0-9_-] are
// escaped as '=' and two hex digits. The mapping is injective and reversible
// ([KeyFromKV]).
func KVKey(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i, seg := range strings.Split(key, "/") {
		if i > 0 {
			b.WriteByte('.')
		}
		escapeInto(&b, seg, keyEscape)
	}
	return b.String(), nil
}

// KeyFromKV is the inverse of [KVKey]: it refuses any KV key other than
// the one [KVKey] makes of the key it decodes to, so two KV keys never
// name the same key.
func KeyFromKV(kvKey string) (string, error) {
	var b strings.Builder
	b.Grow(len(kvKey))
	for i, tok := range strings.Split(kvKey, ".") {
		if i > 0 {
			b.WriteByte('/')
		}
		if err := unescapeInto(&b, tok, keyEscape); err != nil {
			return "", fmt.Errorf("%w: %q: %v", ErrInvalidKey, kvKey, err)
		}
	}
	key := b.String()
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	// An escaped '/' ("a=2Fb") decodes to a key whose KV key is "a.b":
	// only the KV key the key maps onto names it.
	if canon, _ := KVKey(key); canon != kvKey {
		return "", fmt.Errorf("%w: %q is not the canonical KV key of %q (%q)", ErrInvalidKey, kvKey, key, canon)
	}
	return key, nil
}

// StateKVKey is the KV key of key in scope inside [StateBucket]:
// "<scope>.<KVKey(key)>".
func StateKVKey(scope, key string) (string, error) {
	if err := ValidateID("scope", scope); err != nil {
		return "", err
	}
	k, err := KVKey(key)
	if err != nil {
		return "", err
	}
	return scope + "." + k, nil
}

// SplitStateKVKey is the inverse of [StateKVKey].
func SplitStateKVKey(kvKey string) (scope, key string, err error) {
	scope, rest, ok := strings.Cut(kvKey, ".")
	if !ok {
		return "", "", fmt.Errorf("%w: %q has no scope", ErrInvalidKey, kvKey)
	}
	if err := ValidateID("scope", scope); err != nil {
		return "", "", err
	}
	key, err = KeyFromKV(rest)
	return scope, key, err
}

// StatePrefixFilter is the KV key filter for every key of scope under
// prefix (a '/'-separated key prefix ending at a segment boundary, or "" for
// the whole scope): "<scope>.>" or "<scope>.<KVKey(prefix)>.>".
func StatePrefixFilter(scope, prefix string) (string, error) {
	if err := ValidateID("scope", scope); err != nil {
		return "", err
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return scope + ".>", nil
	}
	k, err := KVKey(prefix)
	if err != nil {
		return "", err
	}
	return scope + "." + k + ".>", nil
}
