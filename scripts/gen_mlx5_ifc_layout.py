#!/usr/bin/env python3
"""Writes testing/include/gpucomm/testing/nic_model/detail/mlx5_ifc_layout.hpp: the layouts of the mlx5
firmware commands that the firmware model (testing/nic_model/firmware.hpp) decodes, taken from the
Linux kernel's include/linux/mlx5/mlx5_ifc.h (Debian: linux-headers-*-common), a source written
independently of verbs_gpu's own host/prm_cmd.hpp.

  scripts/gen_mlx5_ifc_layout.py --ifc /usr/src/linux-headers-<version>-common/include/linux/mlx5/mlx5_ifc.h \\
      --out testing/include/gpucomm/testing/nic_model/detail/mlx5_ifc_layout.hpp
  ... --out BUILD/mlx5_ifc_layout.hpp --check testing/include/gpucomm/testing/nic_model/detail/mlx5_ifc_layout.hpp
      (the ctest: regenerate, then fail with a diff when the committed file differs)

The kernel header is parsed by tests/host/prm_layout/check_prm_layout.py (imported, not copied).
For each structure in STRUCTS the output lists the members the model reads or writes (dotted path,
bit offset, bit width) and, for input structures, every reserved bit range (flattened through nested
structures): firmware requires reserved bits to be zero, and the model checks exactly these.

Two kinds of bits are not what the kernel header says they are, and both are handled here:
  * DEVX-only members (DEVX_ONLY): user-space UMEM fields that the kernel leaves reserved because
    only DEVX uses them. Their positions come from rdma-core's providers/mlx5/mlx5_ifc.h (qpc) and
    DPDK's drivers/common/mlx5/mlx5_prm.h (cqc, create_cq_in); each must lie wholly inside one
    reserved kernel member, and is cut out of the reserved ranges.
  * The uid slot (bits 0x10-0x1f of every command input): the kernel's DEVX layer writes the
    caller's user id there before the firmware sees the command, so it is never checked.

Constants (opcodes, status codes, enumerations) are read from the headers beside mlx5_ifc.h and
written under the kernel's own names. Only lines starting with "// source:" may differ between a
regenerated file and the committed one (they name the kernel package); everything else must match.
Standard library only.
"""

import argparse
import difflib
import glob
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # the parser lives in the source tree; leave no __pycache__ there
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "host", "prm_layout"))
import check_prm_layout  # noqa: E402  (the mlx5_ifc.h parser)

# DEVX-only members the kernel leaves reserved: (structure, member, bit offset, bit width).
DEVX_ONLY = [
    ("cqc", "dbr_umem_id", 0x20, 0x20),
    ("create_cq_in", "cq_umem_offset", 0x280, 0x40),
    ("create_cq_in", "cq_umem_id", 0x2c0, 0x20),
    ("qpc", "dbr_umem_id", 0x720, 0x20),
]
UID_SLOT = (0x10, 0x10)

QPC = ["st", "pm_state", "pd", "mtu", "log_msg_max", "log_rq_size", "log_rq_stride", "no_sq", "log_sq_size",
       "ts_format", "counter_set_id", "uar_page", "user_index", "log_page_size", "remote_qpn",
       "log_ack_req_freq", "log_sra_max", "retry_count", "rnr_retry", "next_send_psn", "cqn_snd", "log_rra_max",
       "atomic_mode", "rre", "rwe", "rae", "page_offset", "min_rnr_nak", "next_rcv_psn", "cqn_rcv", "dbr_addr",
       "rq_type", "srqn_rmpn_xrqn", "dbr_umem_valid", "dbr_umem_id"]
ADS = ["pkey_index", "grh", "rlid", "ack_timeout", "src_addr_index", "stat_rate", "hop_limit", "tclass",
       "flow_label", "rgid_rip", "dscp", "udp_sport", "eth_prio", "sl", "vhca_port_num", "rmac_47_32+rmac_31_0"]
QP_CMD = ["opcode", "uid", "op_mod", "opt_param_mask"] + ["qpc." + f for f in QPC] + \
         ["qpc.primary_address_path." + f for f in ADS]
HCA_CAP = ["log_max_qp_sz", "log_max_qp", "log_max_cq_sz", "log_max_cq", "log_max_eq_sz", "log_max_mkey",
           "log_max_eq", "log_max_mrw_sz", "log_max_ra_req_qp", "log_max_ra_res_qp", "port_type", "num_ports",
           "log_max_msg", "cqe_version", "cqe_compression", "apu", "roce", "atomic", "cq_oi", "rc", "uar_4k",
           "uar_sz", "log_pg_sz", "bf", "log_bf_reg_size", "log_max_pd", "sq_ts_format", "rq_ts_format",
           "log_max_umem", "log_uar_page_sz", "num_of_uars_per_page", "max_num_eqs", "umem_uid_0"]
ROCE_CAP = ["qp_ts_format", "l3_type", "roce_version", "r_roce_dest_udp_port", "r_roce_max_src_udp_port",
            "r_roce_min_src_udp_port", "roce_address_table_size"]
ATOMIC_CAPS = ["atomic_req_8B_endianness_mode", "supported_atomic_req_8B_endianness_mode_1", "atomic_operations",
               "atomic_size_qp", "atomic_size_dc"]
OUT = ["status", "syndrome"]

# Structure -> the members the model reads or writes. Input structures (*_in) also get their
# reserved ranges.
STRUCTS = {
    "query_hca_cap_in": ["opcode", "op_mod", "other_function", "ec_vf_function", "function_id"],
    "query_hca_cap_out": OUT + ["capability.cmd_hca_cap." + f for f in HCA_CAP] +
                         ["capability.roce_cap." + f for f in ROCE_CAP] +
                         ["capability.atomic_caps." + f for f in ATOMIC_CAPS],
    "create_cq_in": ["opcode", "uid", "op_mod"] + ["cq_context." + f for f in [
        "dbr_umem_valid", "apu_cq", "cqe_sz", "cc", "scqe_break_moderation_en", "oi", "cq_period_mode",
        "cqe_comp_en", "mini_cqe_res_format", "st", "page_offset", "log_cq_size", "uar_page", "cq_period",
        "cq_max_count", "c_eqn_or_apu_element", "log_page_size", "dbr_addr", "dbr_umem_id"]] +
        ["cq_umem_offset", "cq_umem_id", "cq_umem_valid"],
    "create_cq_out": OUT + ["cqn"],
    "destroy_cq_in": ["opcode", "uid", "op_mod", "cqn"],
    "destroy_cq_out": OUT,
    "create_qp_in": QP_CMD + ["qpc_ext", "input_qpn", "ece", "wq_umem_offset", "wq_umem_id", "wq_umem_valid"],
    "create_qp_out": OUT + ["qpn"],
    "rst2init_qp_in": QP_CMD + ["qpn", "ece"],
    "rst2init_qp_out": OUT,
    "init2rtr_qp_in": QP_CMD + ["qpn", "ece"],
    "init2rtr_qp_out": OUT,
    "rtr2rts_qp_in": QP_CMD + ["qpn", "ece"],
    "rtr2rts_qp_out": OUT,
    "qp_2rst_in": ["opcode", "uid", "op_mod", "qpn"],
    "qp_2rst_out": OUT,
    "qp_2err_in": ["opcode", "uid", "op_mod", "qpn"],
    "qp_2err_out": OUT,
    "destroy_qp_in": ["opcode", "uid", "op_mod", "qpn"],
    "destroy_qp_out": OUT,
}
# The common header: every input above has opcode and op_mod here, every output status and syndrome.
CMD_IN = {"opcode": (0x0, 0x10), "op_mod": (0x30, 0x10)}
CMD_OUT = {"status": (0x0, 0x8), "syndrome": (0x20, 0x20)}

# Kernel constants the model uses, by the kernel's names (values read from the headers).
CONSTANTS = [
    "MLX5_CMD_OP_QUERY_HCA_CAP", "MLX5_CMD_OP_CREATE_CQ", "MLX5_CMD_OP_DESTROY_CQ", "MLX5_CMD_OP_MODIFY_CQ",
    "MLX5_CMD_OP_QUERY_CQ", "MLX5_CMD_OP_CREATE_QP", "MLX5_CMD_OP_DESTROY_QP", "MLX5_CMD_OP_RST2INIT_QP",
    "MLX5_CMD_OP_INIT2RTR_QP", "MLX5_CMD_OP_RTR2RTS_QP", "MLX5_CMD_OP_RTS2RTS_QP", "MLX5_CMD_OP_2ERR_QP",
    "MLX5_CMD_OP_2RST_QP", "MLX5_CMD_OP_QUERY_QP",
    "MLX5_CMD_STAT_OK", "MLX5_CMD_STAT_INT_ERR", "MLX5_CMD_STAT_BAD_OP_ERR", "MLX5_CMD_STAT_BAD_PARAM_ERR",
    "MLX5_CMD_STAT_BAD_SYS_STATE_ERR", "MLX5_CMD_STAT_BAD_RES_ERR", "MLX5_CMD_STAT_RES_BUSY",
    "MLX5_CMD_STAT_LIM_ERR", "MLX5_CMD_STAT_BAD_RES_STATE_ERR", "MLX5_CMD_STAT_IX_ERR", "MLX5_CMD_STAT_NO_RES_ERR",
    "MLX5_CMD_STAT_BAD_INP_LEN_ERR", "MLX5_CMD_STAT_BAD_OUTP_LEN_ERR", "MLX5_CMD_STAT_BAD_QP_STATE_ERR",
    "MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE", "MLX5_SET_HCA_CAP_OP_MOD_ATOMIC", "MLX5_SET_HCA_CAP_OP_MOD_ROCE",
    "HCA_CAP_OPMOD_GET_MAX", "HCA_CAP_OPMOD_GET_CUR",
    "MLX5_CAP_PORT_TYPE_IB", "MLX5_CAP_PORT_TYPE_ETH",
    "MLX5_CQC_CQE_SZ_64_BYTES", "MLX5_CQC_CQE_SZ_128_BYTES", "CQE_STRIDE_128_PAD",
    "MLX5_QPC_STATE_RST", "MLX5_QPC_STATE_INIT", "MLX5_QPC_STATE_RTR", "MLX5_QPC_STATE_RTS", "MLX5_QPC_STATE_ERR",
    "MLX5_QPC_ST_RC", "MLX5_QPC_ST_UC", "MLX5_QPC_ST_UD", "MLX5_QPC_ST_XRC", "MLX5_QPC_ST_DCI", "MLX5_QPC_ST_QP0",
    "MLX5_QPC_ST_QP1", "MLX5_QPC_ST_RAW_DATAGRAM", "MLX5_QPC_ST_REG_UMR",
    "MLX5_QPC_PM_STATE_ARMED", "MLX5_QPC_PM_STATE_REARM", "MLX5_QPC_PM_STATE_RESERVED", "MLX5_QPC_PM_STATE_MIGRATED",
    "MLX5_QPC_MTU_256_BYTES", "MLX5_QPC_MTU_4K_BYTES", "MLX5_QPC_MTU_RAW_ETHERNET_QP",
    "MLX5_QPC_ATOMIC_MODE_IB_SPEC", "MLX5_QPC_ATOMIC_MODE_ONLY_8B", "MLX5_QPC_ATOMIC_MODE_UP_TO_8B",
    "MLX5_QPC_ATOMIC_MODE_UP_TO_256B",
    "MLX5_NON_ZERO_RQ", "MLX5_SRQ_RQ", "MLX5_CRQ_RQ", "MLX5_ZERO_LEN_RQ",
    "MLX5_TIMESTAMP_FORMAT_FREE_RUNNING", "MLX5_TIMESTAMP_FORMAT_DEFAULT", "MLX5_TIMESTAMP_FORMAT_REAL_TIME",
    "MLX5_TIMESTAMP_FORMAT_CAP_FREE_RUNNING", "MLX5_TIMESTAMP_FORMAT_CAP_REAL_TIME",
    "MLX5_TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME",
    "MLX5_ATOMIC_OPS_CMP_SWAP", "MLX5_ATOMIC_OPS_FETCH_ADD", "MLX5_ATOMIC_OPS_EXTENDED_CMP_SWAP",
    "MLX5_ATOMIC_OPS_EXTENDED_FETCH_ADD", "MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_4_BYTES",
    "MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES",
    "MLX5_ROCE_VERSION_1_CAP", "MLX5_ROCE_VERSION_2_CAP", "MLX5_ROCE_L3_TYPE_IPV4_CAP", "MLX5_ROCE_L3_TYPE_IPV6_CAP",
    "MLX5_QP_OPTPAR_ALT_ADDR_PATH", "MLX5_QP_OPTPAR_RRE", "MLX5_QP_OPTPAR_RAE", "MLX5_QP_OPTPAR_RWE",
    "MLX5_QP_OPTPAR_PKEY_INDEX", "MLX5_QP_OPTPAR_RNR_TIMEOUT", "MLX5_QP_OPTPAR_PM_STATE", "MLX5_QP_OPTPAR_LAG_TX_AFF",
    "MLX5_ADAPTER_PAGE_SHIFT",
]


def read_constants(texts, names):
    """{name: value} for each of `names` defined as `NAME = <number or a << b>` in an enum."""
    want, out = set(names), {}
    for text in texts:
        text = check_prm_layout.strip_comments(text)
        for name, expr in re.findall(r"\b([A-Z][A-Z0-9_]*)\s*=\s*([^,}\n]+)", text):
            if name not in want or name in out:
                continue
            expr = expr.strip()
            m = re.fullmatch(r"(0x[0-9a-fA-F]+|\d+)(?:\s*<<\s*(0x[0-9a-fA-F]+|\d+|[A-Z][A-Z0-9_]*))?", expr)
            if not m:
                continue
            shift = m.group(2)
            if shift and not shift[0].isdigit():
                if shift not in out:
                    continue
                shift = str(out[shift])
            out[name] = int(m.group(1), 0) << (int(shift, 0) if shift else 0)
    # `1 << NAME` forms (MLX5_ROCE_VERSION_2_CAP = 1 << MLX5_ROCE_VERSION_2) need NAME: second pass.
    missing = want - set(out)
    if missing:
        for text in texts:
            text = check_prm_layout.strip_comments(text)
            for name, base, shift in re.findall(r"\b([A-Z][A-Z0-9_]*)\s*=\s*(\d+|0x[0-9a-fA-F]+)\s*<<\s*([A-Z][A-Z0-9_]*)",
                                                text):
                if name in missing and name not in out:
                    m = re.search(r"\b" + shift + r"\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*[,}\n]", text)
                    if m:
                        out[name] = int(base, 0) << int(m.group(1), 0)
    return out


def split_range(ranges, bit, width):
    """Removes [bit, bit + width) from a list of (name, bit, width) ranges."""
    out = []
    for name, at, n in ranges:
        end, cut_end = at + n, bit + width
        if cut_end <= at or bit >= end:
            out.append((name, at, n))
            continue
        if at < bit:
            out.append((name, at, bit - at))
        if cut_end < end:
            out.append((name, cut_end, end - cut_end))
    return out


class Generator:
    def __init__(self, ifc_path):
        folder = os.path.dirname(ifc_path)
        # mlx5_ifc.h's hca_cap_union names structures of its siblings (mlx5_ifc_fpga.h's fpga_cap).
        siblings = sorted(glob.glob(os.path.join(folder, "mlx5_ifc_*.h")))
        self.layout = check_prm_layout.Layout("".join(open(p).read() for p in [ifc_path] + siblings))
        self.texts = [open(p).read() for p in sorted(glob.glob(os.path.join(folder, "*.h")))]
        self.devx = {}  # structure -> [(member, bit, width)]
        for struct, member, bit, width in DEVX_ONLY:
            where = self.layout.reserved_around(struct, bit, width)
            if where is None:
                raise SystemExit(f"DEVX-only {struct}.{member} (bits {bit:#x}+{width:#x}) is not inside one reserved "
                                 f"member of the kernel's mlx5_ifc_{struct}_bits: the kernel defined something there")
            self.devx.setdefault(struct, []).append((member, bit, width))

    def resolve(self, struct, path):
        """(bit, width, devx_only) of `path` in `struct`, DEVX-only members included."""
        parts = path.split(".")
        offset, name = 0, struct
        for k, part in enumerate(parts):
            devx = [d for d in self.devx.get(name, []) if d[0] == part]
            if devx and k == len(parts) - 1:
                return offset + devx[0][1], devx[0][2], True
            if k == len(parts) - 1:
                at, width = self.layout.resolve(name, part)
                return offset + at, width, False
            hit = [f for f in self.layout.fields(name) if f[0] == part]
            if not hit or hit[0][1] is None:
                raise SystemExit(f"mlx5_ifc_{name}_bits has no structure member '{part}' (path {path} in {struct})")
            offset += hit[0][2]
            name = hit[0][1]
        raise AssertionError(path)

    def reserved(self, struct, base=0, prefix=""):
        """Every reserved bit range of `struct` as (path, bit, width), through nested structures,
        less the DEVX-only members."""
        out = []
        for member, typ, at, bits in self.layout.fields(struct):
            if typ is None:
                if member.startswith("reserved"):
                    out.append((prefix + member, base + at, bits))
                continue
            if self.layout.kinds[typ] == "union":
                continue  # which member is meant depends on context; the model checks none inside
            elem = self.layout.size(typ)
            for i in range(bits // elem if elem else 0):
                suffix = f"[{i}]" if bits // elem > 1 else ""
                out += self.reserved(typ, base + at + i * elem, f"{prefix}{member}{suffix}.")
        for member, bit, width in self.devx.get(struct, []):
            out = split_range(out, base + bit, width)
        return out

    def structure(self, name):
        fields = []
        for path in STRUCTS[name]:
            bit, width, devx = self.resolve(name, path)
            fields.append((path.replace("rmac_47_32+rmac_31_0", "rmac"), bit, width, devx))
        reserved = []
        if name.endswith("_in"):
            reserved = split_range(self.reserved(name), *UID_SLOT)
            header = CMD_IN
        else:
            header = CMD_OUT
        for member, (bit, width) in header.items():
            if self.layout.resolve(name, member) != (bit, width):
                raise SystemExit(f"mlx5_ifc_{name}_bits.{member} is not at bit {bit:#x} width {width:#x}: "
                                 "the common command header no longer holds")
        return self.layout.size(name), fields, reserved

    def render(self, source_line):
        constants = read_constants(self.texts, CONSTANTS)
        missing = [n for n in CONSTANTS if n not in constants]
        if missing:
            raise SystemExit(f"the kernel headers define none of: {', '.join(missing)}")
        lines = [
            "#pragma once",
            "// GENERATED by scripts/gen_mlx5_ifc_layout.py: do not edit. The mlx5 firmware command layouts",
            "// that the firmware model (testing/nic_model/firmware.hpp) decodes, from the Linux kernel's",
            "// include/linux/mlx5/mlx5_ifc.h, independent of verbs_gpu/host/prm_cmd.hpp.",
            source_line,
            "// Regenerate (from the repository root):",
            "//   python3 scripts/gen_mlx5_ifc_layout.py",
            "//     --ifc /usr/src/linux-headers-<version>-common/include/linux/mlx5/mlx5_ifc.h",
            "//     --out testing/include/gpucomm/testing/nic_model/detail/mlx5_ifc_layout.hpp",
            "//   (one command line; scripts/test.sh installs the newest linux-headers-*-common)",
            "// The ctest mlx5_ifc_layout regenerates it and fails when this file differs.",
            "//",
            "// Bits are counted from the most significant bit of a structure's first big-endian 32-bit word",
            "// (as MLX5_SET does). Members marked DEVX-only are reserved in the kernel header; their",
            "// positions come from rdma-core's providers/mlx5/mlx5_ifc.h and DPDK's mlx5_prm.h, and the",
            "// generator checks that each lies inside one reserved kernel member. `reserved` lists every",
            "// reserved range of an input structure, nested ones included, less the DEVX-only members and",
            "// the uid slot (bits 0x10-0x1f, which the kernel's DEVX layer fills in).",
            "// clang-format off",
            "",
            "#include <cstdint>",
            "#include <span>",
            "#include <string_view>",
            "",
            "namespace gpucomm::verbs_gpu::model::detail::ifc {",
            "",
            "/// A member of a firmware structure: dotted path, bit offset, bit width.",
            "struct field {",
            "  std::string_view path;",
            "  std::uint32_t bit;",
            "  std::uint32_t width;",
            "};",
            "",
            "/// A firmware structure: its size in bits, the members the model uses, and (input structures)",
            "/// the reserved ranges firmware requires to be zero.",
            "struct structure {",
            "  std::string_view name;",
            "  std::uint32_t bits;",
            "  std::span<field const> fields;",
            "  std::span<field const> reserved;",
            "};",
            "",
            "/// The common command header: every input above starts with opcode and op_mod here, every output",
            "/// with status and syndrome (the generator checks each structure).",
        ]
        for member, (bit, width) in CMD_IN.items():
            lines.append(f"inline constexpr field in_{member}{{\"{member}\", {bit:#x}, {width}}};")
        for member, (bit, width) in CMD_OUT.items():
            lines.append(f"inline constexpr field out_{member}{{\"{member}\", {bit:#x}, {width}}};")
        lines += ["", "// Structures with the same members share one table (the QP state transitions, for one).",
                  "namespace tables {"]
        entries, tables = [], {}

        def table(name, kind, rows):
            """The table holding `rows`, written out the first time they are seen."""
            key = (kind, tuple(rows))
            if key not in tables:
                tables[key] = f"{name}_{kind}"
                lines.append(f"inline constexpr field {name}_{kind}[] = {{")
                for path, bit, width, *devx in rows:
                    lines.append(f"  {{\"{path}\", {bit:#x}, {width}}},{'  // DEVX-only' if devx and devx[0] else ''}")
                lines.append("};")
            return "tables::" + tables[key]

        for name in STRUCTS:
            bits, fields, reserved = self.structure(name)
            entries.append((name, bits, table(name, "fields", fields), table(name, "reserved", reserved) if reserved
                            else "{}"))
        lines += ["}  // namespace tables", ""]
        for name, bits, fields, reserved in entries:
            lines.append(f"inline constexpr structure {name}{{\"{name}\", {bits:#x}, {fields}, {reserved}}};")
        lines += ["", "/// The kernel's constants, under the kernel's own names (so they can be looked up there).",
                  "namespace kernel {"]
        for name in CONSTANTS:
            lines.append(f"inline constexpr std::uint32_t {name} = {constants[name]:#x};")
        lines += ["}  // namespace kernel", "", "}  // namespace gpucomm::verbs_gpu::model::detail::ifc",
                  "// clang-format on", ""]
        return "\n".join(lines)


def source_line(ifc_path):
    """Names the kernel package the header came from (Debian), for the generated file's provenance."""
    package = None
    m = re.search(r"/(linux-headers-[^/]+)/include/linux/mlx5/mlx5_ifc\.h$", os.path.abspath(ifc_path))
    if m:
        package = m.group(1)
    version = None
    if package:
        try:
            version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True,
                                     check=True).stdout.strip() or None
        except (OSError, subprocess.CalledProcessError):
            version = None
    what = f"Debian package {package} {version}" if package and version else (package or os.path.abspath(ifc_path))
    return f"// source: {what}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ifc", required=True, help="the kernel's include/linux/mlx5/mlx5_ifc.h")
    ap.add_argument("--out", required=True, help="where to write the header")
    ap.add_argument("--check", help="the committed header: exit 1 with a diff when --out differs from it")
    args = ap.parse_args()
    text = Generator(args.ifc).render(source_line(args.ifc))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    if not args.check:
        return 0

    def content(t):
        return [line for line in t.splitlines() if not line.startswith("// source:")]

    committed = open(args.check).read()
    if content(committed) == content(text):
        print(f"{args.check} matches what {args.ifc} generates")
        return 0
    sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), text.splitlines(True), args.check, args.out))
    print(f"\n{args.check} is stale: regenerate it with scripts/gen_mlx5_ifc_layout.py (see its header)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
