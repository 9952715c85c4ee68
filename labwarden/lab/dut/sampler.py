"""A 1 Hz sampler of one process that runs on the DUT (POSIX sh builtins only: no Python, no
forks per sample on busybox), and the host-side parser that turns its lines into CPU%, RSS, IO.

Timestamps come from /proc/uptime, so a late `sleep` does not bias the rate; CPU ticks are
divided by the DUT's CLK_TCK, never assumed.
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel, Field

from labwarden.lab.procfs import parse_stat

# $1 = pid, $2 = samples. Prints "S uptime rss_kb read_bytes write_bytes <stat after ')'>" lines.
SAMPLER_SH = r"""
pid=$1; n=$2; i=0
while [ "$i" -lt "$n" ]; do
  read -r up _ < /proc/uptime || exit 3
  read -r st < "/proc/$pid/stat" 2>/dev/null || { echo "GONE $up"; exit 4; }
  rss=0; rb=0; wb=0
  while read -r k v _; do [ "$k" = "VmRSS:" ] && rss=$v; done < "/proc/$pid/status"
  if [ -r "/proc/$pid/io" ]; then
    while read -r k v; do
      case $k in read_bytes:) rb=$v ;; write_bytes:) wb=$v ;; esac
    done < "/proc/$pid/io"
  fi
  echo "S $up $rss $rb $wb ${st#*) }"
  i=$((i+1))
  if [ "$i" -lt "$n" ]; then sleep 1; fi
done
exit 0
"""


class Sample(BaseModel):
    t: float = Field(description="DUT uptime, s")
    ticks: int = Field(description="utime + stime, clock ticks")
    starttime: int
    rss_kb: int
    read_bytes: int
    write_bytes: int


class SamplerResult(BaseModel):
    samples: list[Sample]
    gone: bool = Field(description="the process exited during the window")

    def cpu_series(self, clk_tck: int) -> list[float]:
        """CPU% of one core over each ~1 s interval."""
        out = []
        for a, b in zip(self.samples, self.samples[1:], strict=False):
            if b.starttime != a.starttime or b.t <= a.t:
                continue
            out.append(100.0 * (b.ticks - a.ticks) / clk_tck / (b.t - a.t))
        return out

    def cpu_mean(self, clk_tck: int) -> float:
        """CPU% over the whole window (first to last sample of one process instance)."""
        a, b = self.samples[0], self.samples[-1]
        if a.starttime != b.starttime:
            raise ValueError("the process restarted during the window")
        return 100.0 * (b.ticks - a.ticks) / clk_tck / (b.t - a.t) if b.t > a.t else 0.0

    def restarted(self) -> bool:
        return len({s.starttime for s in self.samples}) > 1

    def rss_kb(self) -> int:
        return int(statistics.median(s.rss_kb for s in self.samples)) if self.samples else 0


def argv(pid: int, samples: int) -> list[str]:
    """The sampler as an argv: the script is a constant; pid and count are positional args."""
    return ["sh", "-c", SAMPLER_SH, "lw-sampler", str(int(pid)), str(int(samples))]


def parse(text: str) -> SamplerResult:
    samples, gone = [], False
    for line in text.splitlines():
        if line.startswith("GONE"):
            gone = True
        elif line.startswith("S "):
            _, up, rss, rb, wb, rest = line.split(" ", 5)
            st = parse_stat(f"0 (x) {rest}")
            samples.append(Sample(t=float(up), ticks=st.utime + st.stime, starttime=st.starttime,
                                  rss_kb=int(rss), read_bytes=int(rb), write_bytes=int(wb)))
    return SamplerResult(samples=samples, gone=gone)
