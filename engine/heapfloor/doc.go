// Package heapfloor gives a process's garbage collector a floor of
// headroom: the next collection comes when the heap reaches
// max(live × (1 + GOGC/100), live + floor), not before (but by 11 × live
// at the latest: [MaxPercent]).
//
// Go collects when the heap grows by GOGC per cent (100 by default) over
// what the last collection left live. A node whose live heap is small
// (an iii node running turns holds a few tens of MiB) then collects very
// often, and in the turn bench the collector's marking and assists were
// about a tenth of the CPU. A fixed higher GOGC also helps the small heap,
// but multiplies a large one: a node holding 10,000 idle sessions would
// keep several times their memory as garbage. The floor only adds
// headroom while the live heap is small; once live × GOGC/100 exceeds the
// floor, the collector behaves exactly as configured.
//
//	stop := heapfloor.Start(heapfloor.WithFloor(64 << 20))
//	defer stop()
//
// After every collection (a finalizer re-armed each cycle tells it one
// ran) it reads what the runtime's heap goal grows from (runtime/metrics:
// the live heap, plus the stacks and globals it scans) and sets the GC
// percent with runtime/debug.SetGCPercent. A process whose GOGC
// environment variable is set ("off" or a number: a value the runtime
// ignores, empty or a typo, does not count), or that turned the collector
// off, keeps its own setting: Start does nothing. Under a memory limit — the
// process's cgroup or one of its parents (a container's limit, a systemd
// unit's MemoryMax=; cgroup v2 or v1), or GOMEMLIMIT — the floor is at
// most a quarter of it: headroom must not be what runs a small container
// out of memory. GOMEMLIMIT still applies as well: the runtime collects
// earlier when the limit is near, whatever the percent.
package heapfloor
