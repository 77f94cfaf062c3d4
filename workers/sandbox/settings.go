package sandbox

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Settings of the module (workers.Env.Settings["sandbox"]). Durations are
// Go durations ("30m"), booleans strconv.ParseBool's ("true").
const (
	// SettingRoot is the workdirs' folder; relative to the home when not
	// absolute. Default <home>/sandboxes.
	SettingRoot = "root"
	// SettingNode is the node id recorded with each sandbox (default the
	// host name).
	SettingNode = "node"
	// SettingAllowUnsandboxed ("true") lets a node without a working
	// bubblewrap run commands unisolated ([WithAllowUnsandboxed]).
	SettingAllowUnsandboxed = "allow_unsandboxed"
	// SettingBwrap is bubblewrap's path (default /usr/bin/bwrap).
	SettingBwrap = "bwrap"
	// SettingCgroupRoot is where cgroups are mounted (default
	// /sys/fs/cgroup); "off" uses rlimits only.
	SettingCgroupRoot = "cgroup_root"
	// SettingUID and SettingGID are the ids inside the sandbox.
	SettingUID = "uid"
	SettingGID = "gid"
	// SettingHostUID and SettingHostGID are the host ids a root node runs
	// bubblewrap as (default 65534; 0: as root, see [WithHostUser]).
	SettingHostUID = "host_uid"
	SettingHostGID = "host_gid"
	// SettingMaxOutput caps stdout and stderr of an exec, each, in bytes.
	SettingMaxOutput = "max_output_bytes"
	// SettingKillGrace is the time between SIGTERM and SIGKILL.
	SettingKillGrace = "kill_grace"
	// SettingIdleTTL, SettingMaxAge and SettingReapInterval drive the
	// reaper ("0" interval: only at Start).
	SettingIdleTTL      = "idle_ttl"
	SettingMaxAge       = "max_age"
	SettingReapInterval = "reap_interval"
	// SettingOrphanAfter is how long a node may go without a heartbeat
	// before its sandbox records may be replaced ([WithOrphanAfter]).
	SettingOrphanAfter = "orphan_after"
	// SettingDefaultPrefix and SettingMaxPrefix prefix a limit's name to
	// set its default or maximum: "default_memory_mb", "max_pids".
	SettingDefaultPrefix = "default_"
	SettingMaxPrefix     = "max_"
)

// settingNames lists every setting for the error of an unknown one.
func settingNames() []string {
	names := []string{SettingRoot, SettingNode, SettingAllowUnsandboxed, SettingBwrap, SettingCgroupRoot,
		SettingUID, SettingGID, SettingHostUID, SettingHostGID, SettingMaxOutput, SettingKillGrace, SettingIdleTTL, SettingMaxAge, SettingReapInterval, SettingOrphanAfter}
	for _, f := range limitFields {
		names = append(names, SettingDefaultPrefix+f.name, SettingMaxPrefix+f.name)
	}
	return names
}

// parseSettings turns the module's settings into options. home resolves a
// relative root. Any unknown setting or malformed value is an error
// wrapping engine.ErrInvalidOption.
func parseSettings(settings map[string]string, home string) ([]Option, error) {
	var opts []Option
	var def, max Limits
	uid, gid := DefaultUID, DefaultGID
	hostUID, hostGID := DefaultHostUID, DefaultHostGID
	userSet, hostSet := false, false
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v := strings.TrimSpace(settings[k])
		bad := func(want string) error {
			return fmt.Errorf("%w: %s setting %s=%q: want %s", engine.ErrInvalidOption, WorkerName, k, v, want)
		}
		switch k {
		case SettingRoot:
			if v == "" {
				return nil, bad("a folder")
			}
			if !filepath.IsAbs(v) {
				if home == "" {
					return nil, bad("an absolute folder (no home to resolve it against)")
				}
				v = filepath.Join(home, v)
			}
			opts = append(opts, WithRoot(v))
		case SettingNode:
			opts = append(opts, WithNode(v))
		case SettingAllowUnsandboxed:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, bad("true or false")
			}
			opts = append(opts, WithAllowUnsandboxed(b))
		case SettingBwrap:
			opts = append(opts, WithBwrap(v))
		case SettingCgroupRoot:
			if v == "off" {
				v = ""
			} else if v == "" {
				return nil, bad(`a folder or "off"`)
			}
			opts = append(opts, WithCgroupRoot(v))
		case SettingUID, SettingGID, SettingHostUID, SettingHostGID:
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, bad("an integer")
			}
			switch k {
			case SettingUID:
				uid, userSet = n, true
			case SettingGID:
				gid, userSet = n, true
			case SettingHostUID:
				hostUID, hostSet = n, true
			default:
				hostGID, hostSet = n, true
			}
		case SettingMaxOutput:
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, bad("a number of bytes")
			}
			opts = append(opts, WithMaxOutput(n))
		case SettingKillGrace, SettingIdleTTL, SettingMaxAge, SettingReapInterval, SettingOrphanAfter:
			d, err := time.ParseDuration(v)
			if err != nil {
				if v != "0" {
					return nil, bad(`a duration such as "30m"`)
				}
				d = 0
			}
			switch k {
			case SettingKillGrace:
				opts = append(opts, WithKillGrace(d))
			case SettingIdleTTL:
				opts = append(opts, WithIdleTTL(d))
			case SettingMaxAge:
				opts = append(opts, WithMaxAge(d))
			case SettingOrphanAfter:
				opts = append(opts, WithOrphanAfter(d))
			default:
				opts = append(opts, WithReapInterval(d))
			}
		default:
			set, field, ok := limitSetting(k)
			if !ok {
				return nil, fmt.Errorf("%w: %s has no setting %q (want one of %s)", engine.ErrInvalidOption, WorkerName, k, strings.Join(settingNames(), ", "))
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, bad("a positive integer")
			}
			target := &def
			if set == SettingMaxPrefix {
				target = &max
			}
			*field.get(target) = n
		}
	}
	if userSet {
		opts = append(opts, WithSandboxUser(uid, gid))
	}
	if hostSet {
		opts = append(opts, WithHostUser(hostUID, hostGID))
	}
	// Maxima first: a default above the built-in maximum is valid when the
	// settings raise the maximum too.
	if max != (Limits{}) {
		opts = append(opts, WithMaxLimits(max))
	}
	if def != (Limits{}) {
		opts = append(opts, WithDefaultLimits(def))
	}
	return opts, nil
}

// limitSetting splits "default_<limit>" or "max_<limit>".
func limitSetting(k string) (prefix string, f limitField, ok bool) {
	for _, p := range []string{SettingDefaultPrefix, SettingMaxPrefix} {
		if name, found := strings.CutPrefix(k, p); found {
			for _, f := range limitFields {
				if f.name == name {
					return p, f, true
				}
			}
		}
	}
	return "", limitField{}, false
}
