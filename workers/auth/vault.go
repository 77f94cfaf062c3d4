package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/iii-on-nats/iii/agent"
)

// Vault file layout and limits.
const (
	// VaultDir is the vault's directory under the node's home.
	VaultDir = "auth"
	// VaultFile is the vault's file name inside [VaultDir].
	VaultFile = "credentials.json"
	// VaultVersion is the version of the file format this package writes
	// and reads.
	VaultVersion = 1
	// MaxVaultBytes bounds the vault file; a larger file is corrupt.
	MaxVaultBytes = 4 << 20

	// Modes: the file and its directory are private to the owner.
	fileMode = 0o600
	dirMode  = 0o700
)

// tmpInfix names the temp files of atomic writes: "<file>.tmp-<random>".
const tmpInfix = ".tmp-"

// lockSuffix names the lock file beside the vault: "<file>.lock". It is
// never removed: removing a lock file another process waits on would let
// a third one lock a new file at the same time.
const lockSuffix = ".lock"

// DefaultVaultPath is the vault of a node whose home is home:
// "<home>/auth/credentials.json".
func DefaultVaultPath(home string) string {
	return filepath.Join(home, VaultDir, VaultFile)
}

// Vault is the credentials file: a JSON document
//
//	{"version": 1, "credentials": {"anthropic": {"type": "api_key", "key": "…"}}}
//
// mode 0600 in a directory of mode 0700. Every read checks both modes and
// decodes the whole file, so a file a human edited or loosened is seen at
// once; every write replaces the file atomically (temp file in the same
// directory, fsync, rename, fsync of the directory). Writes are serialized
// by a mutex inside the process and by an exclusive flock on
// "<file>.lock" across processes, so several auth workers on one home
// lose no update (where flock is missing, only the mutex: run one worker
// per vault there). The zero Vault is not usable; call [OpenVault].
type Vault struct {
	path string
	dir  string

	mu sync.RWMutex
}

// OpenVault opens the vault at path: it creates the directory (mode 0700)
// when missing, refuses a directory or an existing file whose mode is too
// open ([ErrInsecureVault]) and a file that does not decode
// ([ErrCorruptVault]), and removes the temp files an interrupted write left
// behind. A missing file is an empty vault; the file is created by the
// first write.
func OpenVault(path string) (*Vault, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: set the %q setting, WithVaultPath, or give the node a home", ErrNoVault, SettingVault)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("auth: vault path %s: %w", path, err)
	}
	v := &Vault{path: abs, dir: filepath.Dir(abs)}
	if err := os.MkdirAll(v.dir, dirMode); err != nil {
		return nil, fmt.Errorf("auth: create vault dir %s: %w", v.dir, err)
	}
	if err := v.checkDir(); err != nil {
		return nil, err
	}
	// Under the file lock: a temp file is then no other process's write
	// in flight.
	unlock, err := v.lockFile()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := v.removeTemps(); err != nil {
		return nil, err
	}
	if _, err := v.read(); err != nil {
		return nil, err
	}
	return v, nil
}

// lockFile takes the exclusive cross-process lock of the vault's
// read-modify-write and returns its release. A process killed while
// holding it releases it with its open files.
func (v *Vault) lockFile() (func(), error) {
	unlock, err := lockPath(v.path + lockSuffix)
	if err != nil {
		return nil, fmt.Errorf("auth: vault %s: lock: %w", v.path, err)
	}
	return unlock, nil
}

// Path is the vault file's absolute path.
func (v *Vault) Path() string { return v.path }

// Get returns provider's credential and whether the vault has one.
func (v *Vault) Get(provider string) (agent.Credential, bool, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	m, err := v.read()
	if err != nil {
		return agent.Credential{}, false, err
	}
	c, ok := m[provider]
	return c, ok, nil
}

// All returns every credential by provider.
func (v *Vault) All() (map[string]agent.Credential, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.read()
}

// Providers lists the providers the vault has a credential for, sorted.
func (v *Vault) Providers() ([]string, error) {
	m, err := v.All()
	if err != nil {
		return nil, err
	}
	return sortedKeys(m), nil
}

// Set stores c as provider's credential, replacing any. provider and c are
// validated first ([ValidateProvider], [ValidateCredential]); a vault that
// cannot be read is never overwritten.
func (v *Vault) Set(provider string, c agent.Credential) error {
	if err := ValidateProvider(provider); err != nil {
		return err
	}
	if err := ValidateCredential(c); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	unlock, err := v.lockFile()
	if err != nil {
		return err
	}
	defer unlock()
	m, err := v.read()
	if err != nil {
		return err
	}
	m[provider] = c
	return v.write(m)
}

// Delete removes provider's credential and reports whether there was one.
// Deleting an absent credential writes nothing.
func (v *Vault) Delete(provider string) (bool, error) {
	if err := ValidateProvider(provider); err != nil {
		return false, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	unlock, err := v.lockFile()
	if err != nil {
		return false, err
	}
	defer unlock()
	m, err := v.read()
	if err != nil {
		return false, err
	}
	if _, ok := m[provider]; !ok {
		return false, nil
	}
	delete(m, provider)
	return true, v.write(m)
}

// checkDir refuses a vault directory that others may enter or list.
func (v *Vault) checkDir() error {
	fi, err := os.Stat(v.dir)
	if err != nil {
		return fmt.Errorf("auth: vault dir %s: %w", v.dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: vault dir %s is not a directory", ErrInsecureVault, v.dir)
	}
	if perm := fi.Mode().Perm(); perm&^dirMode != 0 {
		return fmt.Errorf("%w: vault dir %s has mode %04o, wider than %04o (run: chmod 700 %s)", ErrInsecureVault, v.dir, perm, dirMode, v.dir)
	}
	return nil
}

// checkFile refuses a vault file that is not a private regular file.
func (v *Vault) checkFile(fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%w: vault %s is a symlink; it must be a regular file", ErrInsecureVault, v.path)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: vault %s is not a regular file", ErrInsecureVault, v.path)
	}
	if perm := fi.Mode().Perm(); perm&^fileMode != 0 {
		return fmt.Errorf("%w: vault %s has mode %04o, wider than %04o (run: chmod 600 %s)", ErrInsecureVault, v.path, perm, fileMode, v.path)
	}
	return nil
}

// read checks the modes and decodes the file; a missing file is an empty
// vault. The caller holds v.mu.
func (v *Vault) read() (map[string]agent.Credential, error) {
	if err := v.checkDir(); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(v.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]agent.Credential{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: vault %s: %w", v.path, err)
	}
	if err := v.checkFile(fi); err != nil {
		return nil, err
	}
	f, err := os.Open(v.path)
	if err != nil {
		return nil, fmt.Errorf("auth: open vault %s: %w", v.path, err)
	}
	defer f.Close()
	// Check the file actually opened too: it may have been swapped since
	// Lstat.
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("auth: vault %s: %w", v.path, err)
	}
	if err := v.checkFile(fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxVaultBytes+1))
	if err != nil {
		return nil, fmt.Errorf("auth: read vault %s: %w", v.path, err)
	}
	m, err := decodeVault(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (fix or remove the file; it is never replaced while it does not decode)", ErrCorruptVault, v.path, err)
	}
	return m, nil
}

// write replaces the file with m atomically. The caller holds v.mu for
// writing and the file lock. A document larger than [MaxVaultBytes] is
// refused ([ErrVaultFull]): written, it would no longer read.
func (v *Vault) write(m map[string]agent.Credential) (err error) {
	data, err := encodeVault(m)
	if err != nil {
		return err
	}
	if len(data) > MaxVaultBytes {
		return fmt.Errorf("%w: %s would be %d bytes, more than %d (delete a credential first)", ErrVaultFull, v.path, len(data), MaxVaultBytes)
	}
	f, err := os.CreateTemp(v.dir, filepath.Base(v.path)+tmpInfix+"*")
	if err != nil {
		return fmt.Errorf("auth: vault %s: create temp file: %w", v.path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp already uses 0600; Chmod says so explicitly and survives
	// any platform difference.
	if err = f.Chmod(fileMode); err != nil {
		return fmt.Errorf("auth: vault %s: chmod temp file: %w", v.path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("auth: vault %s: write temp file: %w", v.path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("auth: vault %s: sync temp file: %w", v.path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("auth: vault %s: close temp file: %w", v.path, err)
	}
	if err = os.Rename(tmp, v.path); err != nil {
		return fmt.Errorf("auth: vault %s: rename temp file: %w", v.path, err)
	}
	// The rename is durable once the directory entry is.
	if err := syncDir(v.dir); err != nil {
		return fmt.Errorf("auth: vault %s: sync dir: %w", v.path, err)
	}
	return nil
}

// removeTemps deletes the temp files of writes a crash interrupted. It
// runs at open, under the file lock, so no write of this or another
// process is in flight.
func (v *Vault) removeTemps() error {
	pattern := filepath.Join(v.dir, globEscape(filepath.Base(v.path)+tmpInfix)+"*")
	names, err := filepath.Glob(pattern)
	if err != nil {
		return fmt.Errorf("auth: vault %s: list temp files: %w", v.path, err)
	}
	for _, n := range names {
		if err := os.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("auth: vault %s: remove leftover temp file: %w", v.path, err)
		}
	}
	return nil
}

// globEscape escapes the metacharacters of filepath.Match in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// vaultDoc is the vault file's document.
type vaultDoc struct {
	Version     int                         `json:"version"`
	Credentials map[string]agent.Credential `json:"credentials"`
}

// decodeVault decodes and validates a vault file. Blank content is an
// empty vault. Errors never quote the content.
func decodeVault(data []byte) (map[string]agent.Credential, error) {
	if len(data) > MaxVaultBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxVaultBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]agent.Credential{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var doc vaultDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, errors.New(describeJSONError(err, false))
	}
	// Only whitespace may follow (Decoder.More reports false before a
	// '}' or ']', so `{...}}garbage` passed it).
	if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
		return nil, errors.New("trailing data after the document")
	}
	if doc.Version != VaultVersion {
		return nil, fmt.Errorf("version is %d, want %d", doc.Version, VaultVersion)
	}
	m := make(map[string]agent.Credential, len(doc.Credentials))
	for _, p := range sortedKeys(doc.Credentials) {
		c := doc.Credentials[p]
		if err := ValidateProvider(p); err != nil {
			return nil, errors.New("an entry has an invalid provider name")
		}
		if err := ValidateCredential(c); err != nil {
			return nil, fmt.Errorf("provider %s: %w", p, err)
		}
		m[p] = c
	}
	return m, nil
}

// encodeVault is the inverse of decodeVault: indented JSON, providers
// sorted (encoding/json sorts map keys), a final newline.
func encodeVault(m map[string]agent.Credential) ([]byte, error) {
	if m == nil {
		m = map[string]agent.Credential{}
	}
	b, err := json.MarshalIndent(vaultDoc{Version: VaultVersion, Credentials: m}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("auth: encode vault: %w", err)
	}
	return append(b, '\n'), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
