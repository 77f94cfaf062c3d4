// Package directory is the "directory" worker module: it serves skill
// documents, one markdown page per function that says how and when to use
// it, to models and people (SPEC §4).
//
//	directory::skills::get {id}                      → {id, link, worker, title, type?, function_id?, description?, body, source}
//	directory::skills::list {worker?, type?, after?} → {skills: [{id, link, worker, title, type?, function_id?, description?}], truncated?}
//	directory::skills::index {}                      → {workers: [{worker, overview, skills: [id...]}], markdown, truncated?}
//
// A list larger than the server's max payload comes in pages: truncated is
// set, and the next page is asked with after = the id of the last skill.
// An index larger than the max payload is cut to fit (truncated): the
// workers' overviews are left out, then the markdown is cut after a whole
// line and ends with [IndexTruncatedNote].
//
// # Skills
//
// A skill is named "<worker>/<name>" ([ID]), the name being a function id
// ("sandbox/fs::read") or a page such as "<worker>/overview"; its link is
// "iii://sandbox/fs::read", and get accepts either form. A document is
// markdown with an optional YAML frontmatter ([ParseDocument]):
//
//	---
//	title: Read a file
//	type: function
//	function_id: fs::read
//	description: Read a file of the session's sandbox.
//	---
//	body...
//
// Unknown keys are ignored; a frontmatter that does not parse is read as
// body and logged once. Missing fields default: type is "overview" for
// "<worker>/overview" and "function" otherwise; function_id is the name of
// a function skill; title is the function id (else the name); description
// is the body's first sentence, at most [MaxDescriptionLen] characters.
//
// # Sources
//
// Skills come from two places, merged:
//
//   - The skills bucket (subjects.SkillsBucket, "iii-skills"): every worker
//     publishes its functions' skills there at registration
//     (engine.Function.Skill), under subjects.SkillKey(worker, function).
//     Any NATS client can do the same:
//     nats kv put iii-skills sandbox.fs=3A=3Aread "$(cat read.md)".
//     The directory follows the bucket with a KV watch
//     (engine.FollowBucket): puts and deletes show within milliseconds. A
//     bucket deleted and created again (`nats kv rm`/`add`, a restore) is
//     followed again within engine.DefaultBucketCheck, its skills
//     replacing those published; while the bucket is gone they stay.
//   - The skills folder ([WithDir], setting "dir", default <home>/skills):
//     "<dir>/<worker>/<name>.md" is the skill "<worker>/<name>". It is
//     polled every [DefaultPollInterval] (setting "poll_interval"); a
//     missing folder holds no skills.
//
// A folder skill overrides a published skill of the same id: the
// operator's edit wins over what the worker ships, and deleting the file
// brings the published one back. get says which one it served (source
// "folder" or "published").
//
// # Index
//
// The index is what the orchestrator puts into the system prompt: per
// worker, the overview skill if there is one (else a generated list), and
// the whole index as one compact markdown document, one line per skill,
// "- [title](iii://worker/function): description".
//
// The worker publishes "directory/overview" ([OverviewSkill]), which tells
// a model to read a function's skill with directory::skills::get before
// its first use.
//
// # Lifecycle
//
// The module registers itself in init; a node starts it by name
// ("directory"). Provision reads the settings ([SettingDir],
// [SettingPollInterval]); [Worker.Start] opens a [Directory] (creating the
// bucket if missing, loading both sources), registers the three functions
// (idempotent, each with its own skill) and publishes the overview;
// [Worker.Close] stops them and the watches. A [Directory] can also be
// used alone:
//
//	d, err := directory.Open(ctx, e, directory.WithDir("/srv/iii/skills"))
//	if err != nil { ... }
//	defer d.Close(ctx)
//	s, err := d.Get("iii://sandbox/fs::read")
//
// From a shell:
//
//	nats req iii.fn.directory.skills.get '{"id":"iii://directory/overview"}'
//
// Errors on the wire are invalid_payload (a malformed id or filter) and
// not_found (no such skill).
package directory
