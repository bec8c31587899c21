#!/usr/bin/env python3
"""Draws the scaling curve of bench/scale.cc as an SVG (no plotting library needed).

  build/bench/scale --json /tmp/scale.json
  python3 bench/scale_plot.py /tmp/scale.json docs/benchmarks-scale.svg

Three panels over the host count (log scale): launcher CPU per host (ms), peak RSS per host (KB)
and the time from the start to every process running (s).
"""
import json
import math
import sys

W, H, PAD = 260, 200, 46


def panel(x0, title, points, unit):
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    lx0, lx1 = math.log10(min(xs)), math.log10(max(xs))
    top = max(ys) * 1.25 or 1
    def px(x):
        span = (lx1 - lx0) or 1
        return x0 + PAD + (math.log10(x) - lx0) / span * (W - PAD - 12)
    def py(y):
        return H - PAD + 10 - y / top * (H - PAD - 20)
    out = [f'<text x="{x0 + W / 2}" y="14" text-anchor="middle" font-size="12">{title}</text>',
           f'<line x1="{x0 + PAD}" y1="{py(0)}" x2="{x0 + W - 8}" y2="{py(0)}" stroke="black"/>',
           f'<line x1="{x0 + PAD}" y1="{py(0)}" x2="{x0 + PAD}" y2="{py(top)}" stroke="black"/>']
    for k in range(5):
        y = top * k / 4
        out.append(f'<text x="{x0 + PAD - 4}" y="{py(y) + 4}" text-anchor="end" '
                   f'font-size="10">{y:.3g}</text>')
    for x in xs:
        out.append(f'<text x="{px(x)}" y="{py(0) + 14}" text-anchor="middle" '
                   f'font-size="10">{x}</text>')
    out.append(f'<text x="{x0 + W / 2}" y="{H - 4}" text-anchor="middle" font-size="10">hosts '
               f'(x 8 processes); y: {unit}</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, (x, y) in
                    enumerate(points))
    out.append(f'<path d="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for x, y in points:
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="#1f77b4"/>')
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = json.load(open(sys.argv[1]))
    cpu = [(r["hosts"], r["cpu_ms_per_host"]) for r in rows]
    rss = [(r["hosts"], r["maxrss_kb"] / r["hosts"]) for r in rows]
    run = [(r["hosts"], r["all_running_s"]) for r in rows]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * W}" height="{H}" '
             f'font-family="sans-serif">', f'<rect width="{3 * W}" height="{H}" fill="white"/>']
    parts += panel(0, "launcher CPU per host", cpu, "ms")
    parts += panel(W, "peak RSS per host", rss, "KB")
    parts += panel(2 * W, "start to all running", run, "s")
    parts.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
