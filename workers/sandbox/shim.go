package sandbox

import (
	"strconv"
	"strings"
)

// shell is the host's POSIX shell: it runs the shim (and, inside the
// sandbox, a request's command).
const shell = "/bin/sh"

// shimName is $0 of the shim and the prefix of its own error messages.
const shimName = "iii-sandbox"

// shimExit is the shim's exit status when it cannot set a limit up.
const shimExit = 125

// shimScript runs outside the sandbox, as the process the worker starts.
// It joins the exec's cgroups (v1: by writing its pid; on v2 the process
// is born in its cgroup), sets the rlimits every process of the exec
// inherits, then execs bubblewrap (or, without isolation, the command).
// Nothing in it is parsed from a request: the cgroup files and limits are
// positional parameters, the command follows "--" and is only ever
// "$@".
//
//	$1 cpu seconds (soft; hard is one more), $2 file size in 512-byte
//	blocks, $3 address space in KiB or 0, then cgroup.procs files, "--",
//	the program and its arguments.
const shimScript = `cpu=$1 fsize=$2 vmem=$3
shift 3
while [ "$#" -gt 0 ]; do
	f=$1
	shift
	[ "$f" = -- ] && break
	echo $$ > "$f" || { echo "` + shimName + `: cannot join cgroup $f" >&2; exit 125; }
done
ulimit -c 0 && ulimit -S -t "$cpu" && ulimit -H -t $((cpu + 1)) && ulimit -f "$fsize" || { echo "` + shimName + `: cannot set rlimits" >&2; exit 125; }
if [ "$vmem" != 0 ]; then ulimit -v "$vmem" || { echo "` + shimName + `: cannot set RLIMIT_AS" >&2; exit 125; }; fi
exec "$@"`

// shimLimits are the rlimits the shim sets.
type shimLimits struct {
	cpuSeconds int
	fsizeBytes int64
	vmemBytes  int64 // 0: none
}

// shimArgs is the argv that runs program under the shim: join procsFiles,
// set lim, exec program.
func shimArgs(lim shimLimits, procsFiles []string, program []string) []string {
	a := make([]string, 0, 8+len(procsFiles)+len(program))
	a = append(a, shell, "-c", shimScript, shimName,
		strconv.Itoa(lim.cpuSeconds),
		strconv.FormatInt(lim.fsizeBytes/512, 10),
		strconv.FormatInt(lim.vmemBytes/1024, 10),
	)
	a = append(a, procsFiles...)
	a = append(a, "--")
	return append(a, program...)
}

// isShimFailure reports whether an exec's exit status and stderr are the
// shim's own failure rather than the command's.
func isShimFailure(exit int, stderr string) bool {
	return exit == shimExit && strings.HasPrefix(stderr, shimName+": ")
}
