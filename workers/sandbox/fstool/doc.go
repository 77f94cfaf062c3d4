// Package fstool is the file tools of the sandbox: fs::read, fs::write,
// fs::edit, fs::ls, fs::glob and fs::grep, confined to the working
// directory of the caller's session. It is a library: [Functions] returns
// the functions and the sandbox worker registers them.
//
//	fs::read  {path, offset?, limit?}        → {path, content, lines_read, total_lines, truncated, binary?, size}
//	fs::write {path, content}                → {path, bytes, created}
//	fs::edit  {path, old_text, new_text, replace_all?} → {path, replacements}
//	fs::ls    {path?}                        → {path, entries:[{name, type, size, mod_time}], truncated}
//	fs::glob  {pattern, path?}               → {matches:[...], truncated}
//	fs::grep  {pattern, path?, glob?, ignore_case?, max_results?} → {matches:[{path, line, text}], truncated, skipped?, skipped_files?}
//
// Every call asks the [Resolver] for its root (the session's workdir),
// opens it as an [os.Root] and works beneath it. A path is relative to the
// root, or absolute and inside it (then it is made relative); answers name
// paths relative to the root.
//
// # Confinement
//
//   - ".." past the root ("../x", "a/../../x") and absolute paths
//     elsewhere ("/etc/passwd", "/proc/self/root/...") are refused with
//     forbidden before any file is touched.
//   - A symlink anywhere in a path is refused with forbidden, even one
//     that points inside the root: the tools never follow symlinks. fs::ls
//     shows them, fs::glob lists them without entering them, fs::grep
//     skips them.
//   - The check above is a policy; the confinement itself is os.Root,
//     which resolves every name beneath the root (openat, component by
//     component) and refuses what escapes, so a symlink planted between
//     the check and the use still cannot lead outside. A read also checks
//     that it opened the very file it checked, and never blocks on a FIFO.
//   - fs::write and fs::edit write a temporary file in the same directory
//     (created exclusively) and rename it over the target: a reader never
//     sees half a file, and a symlink or hard link at the target is
//     replaced rather than written through. A process killed between the
//     two leaves the temporary file; [IsTempFile] recognises its name, and
//     the sandbox worker removes old ones when it adopts a workdir.
//   - Since a rename ignores the target's mode (and the tools often run
//     as root), fs::write and fs::edit check it themselves: a file whose
//     owner may not write it (chmod 0444) is forbidden, as a write in the
//     sandbox would be, and so is a new or replaced file (or a missing
//     parent) in a directory whose owner may not write and search it
//     (chmod 0555), or below one whose owner may not search it (chmod
//     0600): every directory from the root down is checked, as the
//     kernel's path walk checks it for a process of the sandbox. A
//     replaced file keeps its mode.
//   - Run as root, they keep a replaced file's owner and give what
//     fs::write creates to [WithOwner]'s (the sandbox's user), so a
//     process of the sandbox may write it at once (best effort, like the
//     sandbox worker's owner fix before each exec). Any other process
//     makes files of its own.
//   - A NUL byte, bytes that are not UTF-8, an over-long path or an
//     empty required path is invalid_payload.
//
// Answers are valid UTF-8, as msgpack and JSON strings must be: a name on
// the disk that is not (fs::ls, fs::glob, fs::grep) and a line past the
// binary check of the first 8 KiB (fs::read, fs::grep) show U+FFFD for
// each run of invalid bytes.
//
// Bounds (all options, see [Option]): lines per read and bytes per line,
// bytes per answer, bytes per write, entries per fs::ls and fs::glob,
// matches and file size for fs::grep, entries walked per call. An answer
// that reaches one says truncated; a write over its bound is refused.
// The bytes per answer count raw bytes, so every fs::read, fs::ls,
// fs::glob and fs::grep answer is also fitted to the max payload in the
// caller's codec ([WithMaxPayload]; a JSON caller gets each control
// character as a six-byte escape): cut further to whole lines (a first
// line that does not fit alone is cut and marked), entries or matches
// (then names of skipped files), and truncated, rather than failing as
// internal.
// fs::grep does not search a text file over its size bound (or one that
// grows while read, or cannot be read, or holds a line too long for its
// expression: a match, which cannot be stopped, costs up to the
// expression's program size per byte, and one match is bounded to about
// half a second): it says truncated and names the file in skipped (at
// most [MaxGrepSkipped] names, skipped_files counts them all), so a
// missing match is never taken for a missing string. Binary files are
// not searched, whatever their size, and not named. Within the bounds a
// call also stops when its caller's time runs out, in the middle of a
// line, between the lines fs::grep matches, or in a directory. A brace
// pattern costs time linear in its groups.
//
// With [WithQuota], fs::write and fs::edit ask the [Quota] before a write
// that grows the disk space the root takes (the sandbox worker holds the
// workdir to its disk_mb this way) and write nothing when it refuses.
//
// # Errors
//
// Errors that cross the wire are *wire.Error values from the catalog:
//
//   - invalid_payload: the request does not validate (empty or NUL path,
//     bad pattern or expression, old_text empty or equal to new_text), or
//     does not fit the file (a directory to fs::read, old_text not found
//     or ambiguous — details carry "matches" —, content over the cap);
//   - forbidden: the path leaves the root or goes through a symlink; the
//     file to write, or the directory it goes in, is read-only, or a
//     directory on the way may not be searched; the quota
//     refused the write (its error passes through as is);
//   - not_found: the file does not exist, or the resolver found no root
//     (a *wire.Error from the resolver passes through as is);
//   - unavailable: the disk is full;
//   - timeout / canceled: the caller's time ran out;
//   - internal: anything else (messages never name the root).
//
// # Lifecycle
//
// There is none: the functions hold no state but in-process locks that
// serialise writers of one file. Register them and they serve.
//
//	fns, err := fstool.Functions(func(ctx context.Context) (string, error) {
//		sid, _ := engine.SessionFromContext(ctx)
//		return workdirOf(sid) // the sandbox's own mapping
//	})
//	if err != nil { ... }
//	for _, fn := range fns {
//		if err := w.Register(fn); err != nil { ... }
//	}
//
// From a shell (JSON):
//
//	nats req iii.fn.fs.read '{"path":"README.md","limit":20}'
package fstool
