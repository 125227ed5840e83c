"""png_probe.py FILE.png X Y W H ...: for each box (X, Y, W, H) in pixels, prints the box's most
common colour as #rrggbb and the share of its pixels that have it, one box a line.

Reads the 8-bit, non-interlaced RGB or RGBA PNG files a browser's screenshot is, with zlib
alone (no imaging library): the boxes of a screenshot are compared with the colours the
picture should have there. Exits 1 with a message for anything else.
"""
import struct
import sys
import zlib


def fail(msg):
    print("png_probe: " + msg, file=sys.stderr)
    sys.exit(1)


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: not a PNG file")
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    if hdr is None:
        fail(f"{path}: no IHDR")
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace != 0:
        fail(f"{path}: depth {depth}, colour type {ctype}, interlace {interlace}: not read")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ft == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
            elif ft != 0:
                fail(f"{path}: filter {ft}")
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main():
    args = sys.argv[1:]
    if len(args) < 5 or (len(args) - 1) % 4 != 0:
        fail("usage: png_probe.py FILE.png X Y W H [X Y W H ...]")
    w, h, bpp, rows = read_png(args[0])
    for k in range(1, len(args), 4):
        x0, y0, bw, bh = (int(v) for v in args[k:k + 4])
        if x0 < 0 or y0 < 0 or x0 + bw > w or y0 + bh > h or bw <= 0 or bh <= 0:
            fail(f"box {x0} {y0} {bw} {bh} outside the {w}x{h} picture")
        counts = {}
        for y in range(y0, y0 + bh):
            for x in range(x0, x0 + bw):
                px = rows[y][x * bpp:x * bpp + 3]
                key = "#%02x%02x%02x" % tuple(px)
                counts[key] = counts.get(key, 0) + 1
        best = max(counts, key=counts.get)
        print(f"{best} {counts[best] * 100 // (bw * bh)}")


main()
