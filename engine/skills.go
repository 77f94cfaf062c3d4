package engine

import (
	"context"
	"time"

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
// not written again.
func (e *Engine) PublishSkill(ctx context.Context, worker, functionID, markdown string) error {
	key, err := subjects.SkillKey(worker, functionID)
	if err != nil {
		return wire.Wrap(wire.CodeInvalidPayload, err, "")
	}
	if len(markdown) == 0 || len(markdown) > MaxSkillSize {
		return wire.Errorf(wire.CodeInvalidPayload, "skill %s: %d bytes (1 to %d)", key, len(markdown), MaxSkillSize)
	}
	kv, err := e.EnsureKV(ctx, SkillsBucketConfig())
	if err != nil {
		return err
	}
	if cur, err := kv.Get(ctx, key); err == nil && string(cur.Value()) == markdown {
		return nil
	}
	if _, err := kv.Put(ctx, key, []byte(markdown)); err != nil {
		return wire.Wrap(wire.CodeUnavailable, err, "publish skill %s", key)
	}
	return nil
}
