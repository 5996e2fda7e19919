"""Counts the pixels of a PNG screenshot that have given colours (standard library only).

Usage: png_colors.py FILE RRGGBB [RRGGBB ...]
Prints one line per colour: `RRGGBB COUNT` (a pixel counts when each channel is within 8).
Handles what Chromium's headless screenshots are: 8-bit RGB or RGBA, non-interlaced, the five
PNG row filters.
"""
import struct
import sys
import zlib


def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path} is not a PNG")
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise SystemExit(f"unsupported PNG: depth {depth} colour type {ctype}")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    out = []
    i = 0
    for _ in range(height):
        f = raw[i]
        row = bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = row[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                row[x] = (row[x] + a) & 255
            elif f == 2:
                row[x] = (row[x] + b) & 255
            elif f == 3:
                row[x] = (row[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                row[x] = (row[x] + pred) & 255
        out.append(bytes(row))
        prev = row
    return out, bpp


def main():
    rows, bpp = pixels(sys.argv[1])
    wanted = [tuple(int(h[k : k + 2], 16) for k in (0, 2, 4)) for h in sys.argv[2:]]
    counts = [0] * len(wanted)
    for row in rows:
        for x in range(0, len(row), bpp):
            px = row[x : x + 3]
            for n, w in enumerate(wanted):
                if all(abs(px[k] - w[k]) <= 8 for k in range(3)):
                    counts[n] += 1
    for h, n in zip(sys.argv[2:], counts):
        print(h, n)


main()
