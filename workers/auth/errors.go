package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors of the Go API. Every error this package builds names
// paths, providers, fields and byte offsets, never a secret.
var (
	// ErrStarted is returned by [Worker.Start] when called twice.
	ErrStarted = workers.ErrStarted
	// ErrInsecureVault is returned for a vault file whose mode is wider
	// than 0600, a vault directory wider than 0700, or a vault path that is
	// not a regular file (a symlink, a directory): the vault is refused,
	// as ssh refuses a private key others can read.
	ErrInsecureVault = errors.New("auth: vault permissions are too open")
	// ErrCorruptVault is returned for a vault file that does not decode or
	// holds an invalid entry. The file is left as it is: nothing replaces
	// it until a human repairs or removes it.
	ErrCorruptVault = errors.New("auth: vault is corrupt")
	// ErrVaultFull is returned by a set that would make the vault file
	// larger than [MaxVaultBytes] (a file that no longer reads): nothing is
	// written; on the wire it is invalid_payload.
	ErrVaultFull = errors.New("auth: vault is full")
	// ErrNoVault is returned by [Open] and [Worker.Start] when no vault
	// path is known: neither [WithVaultPath], the "vault" setting nor a
	// home directory.
	ErrNoVault = errors.New("auth: no vault path")
	// ErrInvalidProvider is returned for a provider that is not an id
	// (agent.ValidateID: 1 to 128 characters of A-Z a-z 0-9 _ -).
	ErrInvalidProvider = errors.New("auth: invalid provider")
	// ErrInvalidCredential is returned for a credential [ValidateCredential]
	// refuses.
	ErrInvalidCredential = errors.New("auth: invalid credential")
)

// invalidWrap is the invalid_payload error of a request that fails
// validation; cause is one of this package's validation errors (which
// never quote a secret).
func invalidWrap(cause error) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, cause, "")
}

// vaultErr maps a vault failure onto the catalog: internal, keeping the
// cause for errors.Is (ErrInsecureVault, ErrCorruptVault). The engine logs
// internal errors, so the vault's problem is loud on the worker's side too.
func vaultErr(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return wire.Wrap(wire.CodeInternal, err, "")
}

// describeJSONError says where and why JSON input failed to decode without
// quoting any of the input: syntax errors and type errors by byte offset
// (and, for requests, by field), anything else generically. The decoders'
// own messages may echo a character or a number of the input, and the
// input may be a secret.
func describeJSONError(err error, withField bool) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		if withField && te.Field != "" && te.Type != nil {
			return fmt.Sprintf("field %s must be %s (byte %d)", te.Field, te.Type, te.Offset)
		}
		return fmt.Sprintf("value of the wrong type at byte %d", te.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	return "not a JSON document of the expected shape"
}
