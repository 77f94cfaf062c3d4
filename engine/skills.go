package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// MaxSkillSize bounds one skill document.
const MaxSkillSize = 64 << 10

// skillPublishTimeout bounds the publication of a skill at registration.
const skillPublishTimeout = 5 * time.Second

// SkillsBucketConfig is the configuration of [subjects.SkillsBucket]: one
// markdown document per skill, history 1.
func SkillsBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       subjects.SkillsBucket,
		Description:  "iii skills: one markdown document per worker/function",
		History:      1,
		MaxValueSize: MaxSkillSize,
	}
}

// PublishSkill stores markdown as the skill "<worker>/<function id>" in
// the skills bucket (the directory's source). Any NATS client can do the
// same with a KV put under [subjects.SkillKey]. An unchanged document is
// not written again. A bucket deleted under the engine is created again.
func (e *Engine) PublishSkill(ctx context.Context, worker, functionID, markdown string) error {
	key, err := subjects.SkillKey(worker, functionID)
	if err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if len(markdown) == 0 || len(markdown) > MaxSkillSize {
		return wire.Errorf(wire.CodeInvalidPayload, "skill %s: %d bytes (1 to %d)", key, len(markdown), MaxSkillSize)
	}
	kv, err := e.skillsKV(ctx)
	if err != nil {
		return err
	}
	if cur, err := kv.Get(ctx, key); err == nil && string(cur.Value()) == markdown {
		return nil
	}
	_, err = kv.Put(ctx, key, []byte(markdown))
	if StreamMissing(err) {
		// The bucket was deleted under this engine (a put no stream
		// answered stored nothing): without forgetting its handle, every
		// later publication failed until restart.
		e.mu.Lock()
		e.skills = nil
		e.mu.Unlock()
		if kv, err = e.skillsKV(ctx); err != nil {
			return err
		}
		_, err = kv.Put(ctx, key, []byte(markdown))
	}
	if err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "publish skill %s", key)
	}
	return nil
}

// skillsKV opens the skills bucket once per engine (again once
// [Engine.PublishSkill] forgot it).
func (e *Engine) skillsKV(ctx context.Context) (jetstream.KeyValue, error) {
	e.mu.Lock()
	kv := e.skills
	e.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := e.EnsureKV(ctx, SkillsBucketConfig())
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.skills = kv
	e.mu.Unlock()
	return kv, nil
}

// GeneratedSkill is the skill document of a function registered without
// one: its description and its request and response schemas, so every
// function on the bus has a page in the directory. It is at most
// [MaxSkillSize] bytes: schemas too large indented are shown compact, then
// left out, and a description too large is cut.
func GeneratedSkill(fn Function) string {
	desc := strings.TrimSpace(fn.Description)
	for _, schemas := range []schemaForm{schemasIndented, schemasCompact, schemasNone} {
		if doc := generatedSkill(fn, desc, schemas); len(doc) <= MaxSkillSize {
			return doc
		}
	}
	for {
		doc := generatedSkill(fn, desc, schemasNone)
		over := len(doc) - MaxSkillSize
		if over <= 0 || desc == "" {
			return doc
		}
		// The description is in the document once or twice (its first line
		// in the frontmatter too): cut half the excess at a time.
		desc = strings.ToValidUTF8(desc[:max(len(desc)-(over+1)/2-len("…"), 0)], "")
		if desc != "" {
			desc = strings.TrimRightFunc(desc, unicode.IsSpace) + "…"
		}
	}
}

// schemaForm is how a generated skill shows the function's schemas.
type schemaForm int

const (
	schemasIndented schemaForm = iota
	schemasCompact
	schemasNone
)

func generatedSkill(fn Function, desc string, schemas schemaForm) string {
	var b strings.Builder
	// Function ids may hold characters YAML reads as syntax (a trailing
	// ':', a leading '@', '!' or quote): quote them.
	b.WriteString("---\ntitle: ")
	b.WriteString(yamlQuote(fn.ID))
	b.WriteString("\nfunction_id: ")
	b.WriteString(yamlQuote(fn.ID))
	if first, _, _ := strings.Cut(desc, "\n"); first != "" {
		b.WriteString("\ndescription: ")
		b.WriteString(yamlQuote(first))
	}
	b.WriteString("\n---\n# ")
	b.WriteString(fn.ID)
	b.WriteString("\n\n")
	if desc != "" {
		b.WriteString(desc)
		b.WriteString("\n\n")
	}
	if fn.Idempotent {
		b.WriteString("Idempotent: calling it again with the same arguments is harmless.\n\n")
	}
	for _, part := range []struct{ name, schema string }{{"Arguments", fn.RequestSchema}, {"Result", fn.ResponseSchema}} {
		if part.schema == "" || schemas == schemasNone {
			continue
		}
		var shown bytes.Buffer
		var err error
		if schemas == schemasIndented {
			err = json.Indent(&shown, []byte(part.schema), "", "  ")
		} else {
			err = json.Compact(&shown, []byte(part.schema))
		}
		if err != nil {
			continue
		}
		b.WriteString("## ")
		b.WriteString(part.name)
		b.WriteString(" (JSON Schema)\n\n```json\n")
		b.Write(shown.Bytes())
		b.WriteString("\n```\n\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// yamlQuote makes s one double-quoted YAML scalar.
func yamlQuote(s string) string {
	q, _ := json.Marshal(s) // a JSON string is a valid YAML double-quoted scalar
	return string(q)
}
