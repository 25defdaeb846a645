#!/usr/bin/env python3
"""Zeroes every GPU image in a shared library's .nv_fatbin except the cubins of one SM
architecture, so the library compresses to a fraction of its size for carrying to a device
machine of that architecture.

    slim-fatbin.py <in.so> <out.so> <sm>      # e.g. 90 for an H100/H200

The MLX CUDA wheel's libmlx.so (142 MB) holds each kernel as cubins for sm_75, 80, 90, 100,
120, 121 and PTX for compute_120: 65 MB of images that xz cannot shrink. The CUDA runtime
loads the one image that matches the GPU, so on an sm_90 device the others are never read.
Their payloads become zeros (headers, sizes and offsets untouched), which xz then removes:
the carried file drops from 68 MB to about 15 MB, one device call instead of two.

The output is for carrying only: it must not be installed anywhere but a GPU of that SM.
"""
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50
KIND_ELF = 2


def fatbin_section(path):
    out = subprocess.check_output(["readelf", "-S", "-W", path], text=True)
    for line in out.splitlines():
        fields = line.replace("[", " ").replace("]", " ").split()
        if ".nv_fatbin" in fields:
            i = fields.index(".nv_fatbin")
            return int(fields[i + 3], 16), int(fields[i + 4], 16)
    sys.exit(f"{path}: no .nv_fatbin section")


def main():
    src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = bytearray(open(src, "rb").read())
    start, size = fatbin_section(src)
    pos, end = start, start + size
    kept = zeroed = 0
    while pos < end:
        magic, _version, header, body = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-aligned inside the section
            continue
        entry, stop = pos + header, pos + header + body
        while entry < stop:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            body_at = entry + entry_header
            if kind == KIND_ELF and arch == keep:
                kept += 1
            else:
                data[body_at : body_at + payload] = bytes(payload)
                zeroed += payload
            entry = body_at + payload
        pos = stop
    if kept == 0:
        sys.exit(f"{src}: no sm_{keep} cubin: the library would not run there")
    open(dst, "wb").write(data)
    print(f"kept {kept} sm_{keep} cubins, zeroed {zeroed / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
