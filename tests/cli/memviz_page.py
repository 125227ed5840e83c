"""memviz_page.py PAGE.html MEMORYVIZ.js D3.js OUT.html [--hover | --select N]: PyTorch's memory
viewer page,
as `python -m torch.cuda._memory_viz trace_plot|segment_plot` writes it, made to run without the
network. The page imports PyTorch's MemoryViz.js from a CDN, and MemoryViz.js imports d3 5 (and
d3-axis, d3-scale, d3-zoom, d3-brush, all parts of d3 5's bundle) from another: OUT.html loads
D3.js (the d3 5 bundle, Debian's node-d3) as a classic script and imports a copy of MemoryViz.js,
written beside OUT.html, whose imports read that bundle instead. Nothing else of the page or of
the viewer changes.

What a person would do next is done by a module that runs after the viewer has drawn (the
next animation frame, after the viewer's own): --hover moves the mouse over the first
allocation of the "Active Memory Timeline" plot (the viewer then writes the allocation's
address, size and frames into its context pane); --select N clicks the Nth event (from 0) of the
"Allocator State History" list (the viewer then draws the segments and their blocks as they
were after that event, and writes the event and its frames into its stack pane).

Exits 1 with a message when the page or the viewer does not have the form this relies on.
"""
import os
import re
import sys

CDN_VIEWER = re.compile(r'from "https://[^"]*/torch/utils/viz/MemoryViz\.js"')
D3_IMPORT = re.compile(
    r'^import (\* as d3|\{[^}]*\}) from "https://cdn\.skypack\.dev/d3(-[a-z]+)?@[0-9]+";$',
    re.M)

ACT = """<script type="module">
requestAnimationFrame(() => {
  const target = document.querySelectorAll('%s')[%d];
  if (target !== undefined) {
    target.dispatchEvent(new MouseEvent('%s', {bubbles: true}));
  }
});
</script>
"""


def fail(msg):
    print("memviz_page: " + msg, file=sys.stderr)
    sys.exit(1)


def d3_binding(m):
    what = m.group(1)
    if what == "* as d3":
        return "const d3 = window.d3;"
    return "const " + what + " = window.d3;"


def main():
    args = sys.argv[1:]
    act = ""
    if args[-1:] == ["--hover"]:
        act = ACT % ("svg g[clip-path] polygon", 0, "mouseover")
        args = args[:-1]
    elif len(args) > 2 and args[-2] == "--select" and args[-1].isdigit():
        act = ACT % ('div[style*="monospace"] > pre', int(args[-1]), "mousedown")
        args = args[:-2]
    if len(args) != 4:
        fail("usage: memviz_page.py PAGE.html MEMORYVIZ.js D3.js OUT.html [--hover | --select N]")
    page_path, viewer_path, d3_path, out_path = args
    with open(page_path, encoding="utf-8") as f:
        page = f.read()
    with open(viewer_path, encoding="utf-8") as f:
        viewer = f.read()
    if len(CDN_VIEWER.findall(page)) != 1 or "<head>" not in page or "</body>" not in page:
        fail(f"{page_path}: not the page torch.cuda._memory_viz writes")
    viewer, n = D3_IMPORT.subn(d3_binding, viewer)
    if n == 0 or "cdn.skypack.dev" in viewer or re.search(r"^import ", viewer, re.M):
        fail(f"{viewer_path}: imports other than d3's from skypack: not the viewer this reads")
    out_dir = os.path.dirname(os.path.abspath(out_path))
    with open(os.path.join(out_dir, "MemoryViz.js"), "w", encoding="utf-8") as f:
        f.write(viewer)
    page = CDN_VIEWER.sub('from "./MemoryViz.js"', page)
    page = page.replace("<head>", '<head>\n<script src="file://%s"></script>' % d3_path, 1)
    page = page.replace("</body>", act + "</body>", 1)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(page)


main()
