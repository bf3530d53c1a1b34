package noisy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPUSample is the CPU time (user+system, seconds) of the machine's processes grouped by a name, and the
// machine's non-idle CPU time, at one moment (Linux /proc).
type CPUSample struct {
	At    time.Time
	Procs map[string]float64
	Busy  float64 // the machine's non-idle CPU seconds (all cores)
}

// SampleCPU reads /proc: each process's CPU time is added under group(pid, ppid, comm) (its command name as the
// kernel has it); "" drops it.
func SampleCPU(group func(pid, ppid int, comm string) string) CPUSample {
	s := CPUSample{At: time.Now(), Procs: map[string]float64{}}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		st := string(b)
		i := strings.LastIndex(st, ")")
		j := strings.Index(st, "(")
		if i < 0 || j < 0 || i+2 > len(st) {
			continue
		}
		f := strings.Fields(st[i+2:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseFloat(f[11], 64)
		stt, _ := strconv.ParseFloat(f[12], 64)
		if name := group(pid, ppid, st[j+1:i]); name != "" {
			s.Procs[name] += (ut + stt) / 100 // USER_HZ
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		var tot, idle float64
		for i, x := range f[1:] {
			v, _ := strconv.ParseFloat(x, 64)
			tot += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		s.Busy = (tot - idle) / 100
	}
	return s
}

// CPULine says how many cores the machine and each group used between a and b, the busiest groups first (at
// most top of them; the rest summed as "rest").
func CPULine(a, b CPUSample, top int) string {
	wall := b.At.Sub(a.At).Seconds()
	if wall <= 0 {
		return "no interval"
	}
	type g struct {
		name  string
		cores float64
	}
	var gs []g
	for k, v := range b.Procs {
		gs = append(gs, g{k, (v - a.Procs[k]) / wall})
	}
	slices.SortFunc(gs, func(x, y g) int {
		if x.cores != y.cores {
			if x.cores > y.cores {
				return -1
			}
			return 1
		}
		return strings.Compare(x.name, y.name)
	})
	parts := []string{}
	rest := 0.0
	for i, x := range gs {
		if i < top {
			parts = append(parts, fmt.Sprintf("%s %.2f", x.name, x.cores))
		} else {
			rest += x.cores
		}
	}
	if len(gs) > top {
		parts = append(parts, fmt.Sprintf("rest %.2f", rest))
	}
	return fmt.Sprintf("CPU cores used over %.1fs: machine %.2f; %s", wall, (b.Busy-a.Busy)/wall,
		strings.Join(parts, ", "))
}
