#!/usr/bin/env python3
"""Checks every hand-written PRM command field of verbs_gpu (include/.../host/prm_cmd.hpp) by name,
bit offset and bit width against the Linux kernel's include/linux/mlx5/mlx5_ifc.h, a layout source
written independently of ours (Debian ships it in linux-headers-*-common).

The kernel header describes each firmware structure as `struct mlx5_ifc_<name>_bits` whose members
are bit arrays (`u8 name[0x20];`, `u8 name[0x2][0x8];`, flexible `u8 pas[][0x40];`) or nested
structures and unions (`struct mlx5_ifc_cqc_bits cq_context;`, arrays of them). This script parses
those definitions, computes every member's bit offset and size, reads prm_cmd.hpp's constants, and
compares each `field` with the kernel member that MAPPING names for it.

A few fields exist only for DEVX (user-space UMEM objects): the kernel leaves their bits reserved.
For those the check is that the field lies wholly inside one reserved member of the kernel layout
(so it cannot overlap a defined field), and they are listed as such.

Every field and bit constant of prm_cmd.hpp must have an entry: a new one without a mapping fails.
Exit status 0 when everything matches; 1 with one line per mismatch otherwise.
"""

import argparse
import glob
import os
import re
import sys

# prm_cmd.hpp name -> (kernel command structure, member path), or (structure, None) for DEVX-only
# bits the kernel leaves reserved.
MAPPING = {
    "in_opcode": ("create_cq_in", "opcode"),
    "in_op_mod": ("query_hca_cap_in", "op_mod"),
    "cap_log_max_qp_sz": ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_qp_sz"),
    "cap_log_max_qp": ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_qp"),
    "cap_log_max_cq_sz": ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_cq_sz"),
    "cap_log_max_cq": ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_cq"),
    "cap_log_max_ra_req_qp": ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_ra_req_qp"),
    "cap_log_max_ra_res_qp": ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_ra_res_qp"),
    "cap_port_type": ("query_hca_cap_out", "capability.cmd_hca_cap.port_type"),
    "cap_log_max_msg": ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_msg"),
    "cap_cqe_version": ("query_hca_cap_out", "capability.cmd_hca_cap.cqe_version"),
    "cap_roce": ("query_hca_cap_out", "capability.cmd_hca_cap.roce"),
    "cap_atomic": ("query_hca_cap_out", "capability.cmd_hca_cap.atomic"),
    "cap_cq_oi": ("query_hca_cap_out", "capability.cmd_hca_cap.cq_oi"),
    "cap_rc": ("query_hca_cap_out", "capability.cmd_hca_cap.rc"),
    "cap_bf": ("query_hca_cap_out", "capability.cmd_hca_cap.bf"),
    "cap_log_bf_reg_size": ("query_hca_cap_out", "capability.cmd_hca_cap.log_bf_reg_size"),
    "cap_sq_ts_format": ("query_hca_cap_out", "capability.cmd_hca_cap.sq_ts_format"),
    "roce_cap_qp_ts_format": ("query_hca_cap_out", "capability.roce_cap.qp_ts_format"),
    "atomic_cap_operations": ("query_hca_cap_out", "capability.atomic_caps.atomic_operations"),
    "atomic_cap_size_qp": ("query_hca_cap_out", "capability.atomic_caps.atomic_size_qp"),
    "out_status": ("create_cq_out", "status"),
    "out_syndrome": ("create_cq_out", "syndrome"),
    "out_obj_number": ("create_cq_out", "cqn"),
    "cqc_dbr_umem_valid": ("create_cq_in", "cq_context.dbr_umem_valid"),
    "cqc_cqe_sz": ("create_cq_in", "cq_context.cqe_sz"),
    "cqc_cc": ("create_cq_in", "cq_context.cc"),
    "cqc_oi": ("create_cq_in", "cq_context.oi"),
    "cqc_dbr_umem_id": ("create_cq_in", None),
    "cqc_page_offset": ("create_cq_in", "cq_context.page_offset"),
    "cqc_log_cq_size": ("create_cq_in", "cq_context.log_cq_size"),
    "cqc_uar_page": ("create_cq_in", "cq_context.uar_page"),
    "cqc_c_eqn": ("create_cq_in", "cq_context.c_eqn_or_apu_element"),
    "cqc_log_page_size": ("create_cq_in", "cq_context.log_page_size"),
    "cqc_dbr_addr": ("create_cq_in", "cq_context.dbr_addr"),
    "cq_umem_offset": ("create_cq_in", None),
    "cq_umem_id": ("create_cq_in", None),
    "cq_umem_valid": ("create_cq_in", "cq_umem_valid"),
    "qpc_st": ("create_qp_in", "qpc.st"),
    "qpc_pm_state": ("create_qp_in", "qpc.pm_state"),
    "qpc_pd": ("create_qp_in", "qpc.pd"),
    "qpc_mtu": ("create_qp_in", "qpc.mtu"),
    "qpc_log_msg_max": ("create_qp_in", "qpc.log_msg_max"),
    "qpc_log_rq_size": ("create_qp_in", "qpc.log_rq_size"),
    "qpc_log_rq_stride": ("create_qp_in", "qpc.log_rq_stride"),
    "qpc_no_sq": ("create_qp_in", "qpc.no_sq"),
    "qpc_log_sq_size": ("create_qp_in", "qpc.log_sq_size"),
    "qpc_ts_format": ("create_qp_in", "qpc.ts_format"),
    "qpc_counter_set_id": ("create_qp_in", "qpc.counter_set_id"),
    "qpc_uar_page": ("create_qp_in", "qpc.uar_page"),
    "qpc_user_index": ("create_qp_in", "qpc.user_index"),
    "qpc_log_page_size": ("create_qp_in", "qpc.log_page_size"),
    "qpc_remote_qpn": ("create_qp_in", "qpc.remote_qpn"),
    "ads_pkey_index": ("create_qp_in", "qpc.primary_address_path.pkey_index"),
    "ads_grh": ("create_qp_in", "qpc.primary_address_path.grh"),
    "ads_rlid": ("create_qp_in", "qpc.primary_address_path.rlid"),
    "ads_ack_timeout": ("create_qp_in", "qpc.primary_address_path.ack_timeout"),
    "ads_src_addr_index": ("create_qp_in", "qpc.primary_address_path.src_addr_index"),
    "ads_hop_limit": ("create_qp_in", "qpc.primary_address_path.hop_limit"),
    "ads_tclass": ("create_qp_in", "qpc.primary_address_path.tclass"),
    "ads_rgid_rip_bit": ("create_qp_in", "qpc.primary_address_path.rgid_rip"),
    "ads_dscp": ("create_qp_in", "qpc.primary_address_path.dscp"),
    "ads_udp_sport": ("create_qp_in", "qpc.primary_address_path.udp_sport"),
    "ads_eth_prio": ("create_qp_in", "qpc.primary_address_path.eth_prio"),
    "ads_sl": ("create_qp_in", "qpc.primary_address_path.sl"),
    "ads_vhca_port_num": ("create_qp_in", "qpc.primary_address_path.vhca_port_num"),
    "ads_rmac_bit": ("create_qp_in", "qpc.primary_address_path.rmac_47_32+rmac_31_0"),
    "qpc_log_ack_req_freq": ("create_qp_in", "qpc.log_ack_req_freq"),
    "qpc_log_sra_max": ("create_qp_in", "qpc.log_sra_max"),
    "qpc_retry_count": ("create_qp_in", "qpc.retry_count"),
    "qpc_rnr_retry": ("create_qp_in", "qpc.rnr_retry"),
    "qpc_next_send_psn": ("create_qp_in", "qpc.next_send_psn"),
    "qpc_cqn_snd": ("create_qp_in", "qpc.cqn_snd"),
    "qpc_log_rra_max": ("create_qp_in", "qpc.log_rra_max"),
    "qpc_atomic_mode": ("create_qp_in", "qpc.atomic_mode"),
    "qpc_rre": ("create_qp_in", "qpc.rre"),
    "qpc_rwe": ("create_qp_in", "qpc.rwe"),
    "qpc_rae": ("create_qp_in", "qpc.rae"),
    "qpc_page_offset": ("create_qp_in", "qpc.page_offset"),
    "qpc_min_rnr_nak": ("create_qp_in", "qpc.min_rnr_nak"),
    "qpc_next_rcv_psn": ("create_qp_in", "qpc.next_rcv_psn"),
    "qpc_cqn_rcv": ("create_qp_in", "qpc.cqn_rcv"),
    "qpc_dbr_addr": ("create_qp_in", "qpc.dbr_addr"),
    "qpc_rq_type": ("create_qp_in", "qpc.rq_type"),
    "qpc_dbr_umem_valid": ("create_qp_in", "qpc.dbr_umem_valid"),
    "qpc_dbr_umem_id": ("create_qp_in", None),
    "wq_umem_offset": ("create_qp_in", "wq_umem_offset"),
    "wq_umem_id": ("create_qp_in", "wq_umem_id"),
    "wq_umem_valid": ("create_qp_in", "wq_umem_valid"),
    "modify_qpn": ("rst2init_qp_in", "qpn"),
    "modify_opt_param_mask": ("init2rtr_qp_in", "opt_param_mask"),
}
# Byte-addressed fields (a start bit only): their width in bits.
BIT_STARTS = {"ads_rgid_rip_bit": 128, "ads_rmac_bit": 48}
# Structure bases prm_cmd.hpp adds field offsets to: base name -> (structure, member path).
BASES = {"cqc": ("create_cq_in", "cq_context"), "qpc": ("create_qp_in", "qpc"),
         "ads": ("create_qp_in", "qpc.primary_address_path"), "hca_cap": ("query_hca_cap_out", "capability")}
# Command sizes in bytes: name -> structure (the size without a flexible array member).
SIZES = {"create_cq_in_bytes": "create_cq_in", "create_qp_in_bytes": "create_qp_in",
         "modify_qp_in_bytes": "init2rtr_qp_in", "out_bytes": "create_cq_out",
         "query_hca_cap_in_bytes": "query_hca_cap_in", "query_hca_cap_out_bytes": "query_hca_cap_out"}
# The same offsets hold in every QP state transition command and output structure.
SAME_OFFSETS = [("create_qp_in", "rst2init_qp_in", "qpc"), ("create_qp_in", "init2rtr_qp_in", "qpc"),
                ("create_qp_in", "rtr2rts_qp_in", "qpc"), ("rst2init_qp_in", "init2rtr_qp_in", "qpn"),
                ("rst2init_qp_in", "rtr2rts_qp_in", "qpn"), ("init2rtr_qp_in", "rtr2rts_qp_in", "opt_param_mask"),
                ("create_cq_out", "create_qp_out", "status"), ("create_cq_out", "create_qp_out", "syndrome"),
                ("create_cq_out", "query_hca_cap_out", "status"), ("create_cq_out", "query_hca_cap_out", "syndrome"),
                ("create_cq_in", "query_hca_cap_in", "opcode")]
# Opcodes: prm_cmd.hpp name -> the kernel's MLX5_CMD_OP_* enumerator.
OPCODES = {"op_query_hca_cap": "MLX5_CMD_OP_QUERY_HCA_CAP", "op_create_cq": "MLX5_CMD_OP_CREATE_CQ", "op_create_qp": "MLX5_CMD_OP_CREATE_QP",
           "op_rst2init_qp": "MLX5_CMD_OP_RST2INIT_QP", "op_init2rtr_qp": "MLX5_CMD_OP_INIT2RTR_QP",
           "op_rtr2rts_qp": "MLX5_CMD_OP_RTR2RTS_QP"}
# Other constants whose meaning the kernel names: prm_cmd.hpp name -> enumerator.
ENUMS = {"qp_st_rc": "MLX5_QP_ST_RC", "qp_pm_migrated": "MLX5_QP_PM_MIGRATED",
         "rq_type_zero_length": "MLX5_ZERO_LEN_RQ", "ts_format_default": "MLX5_TIMESTAMP_FORMAT_DEFAULT",
         "atomic_mode_up_to_8b": "MLX5_ATOMIC_MODE_8B", "ts_format_free_running": "MLX5_TIMESTAMP_FORMAT_FREE_RUNNING",
         "hca_cap_general": "MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE", "hca_cap_atomic": "MLX5_SET_HCA_CAP_OP_MOD_ATOMIC",
         "hca_cap_roce": "MLX5_SET_HCA_CAP_OP_MOD_ROCE", "hca_cap_current": "HCA_CAP_OPMOD_GET_CUR",
         "port_type_eth": "MLX5_CAP_PORT_TYPE_ETH", "ts_cap_free_running": "MLX5_TIMESTAMP_FORMAT_CAP_FREE_RUNNING",
         "ts_cap_real_time": "MLX5_TIMESTAMP_FORMAT_CAP_REAL_TIME",
         "ts_cap_free_running_and_real_time": "MLX5_TIMESTAMP_FORMAT_CAP_FREE_RUNNING_AND_REAL_TIME",
         "atomic_op_cmp_swap": "MLX5_ATOMIC_OPS_CMP_SWAP", "atomic_op_fetch_add": "MLX5_ATOMIC_OPS_FETCH_ADD",
         "atomic_op_masked_cmp_swap": "MLX5_ATOMIC_OPS_EXTENDED_CMP_SWAP",
         "atomic_op_masked_fetch_add": "MLX5_ATOMIC_OPS_EXTENDED_FETCH_ADD",
         "atomic_size_4": "MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_4_BYTES", "atomic_size_8": "MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES",
         "event_cq_error": "MLX5_EVENT_TYPE_CQ_ERROR", "event_wq_catas_error": "MLX5_EVENT_TYPE_WQ_CATAS_ERROR",
         "event_path_mig_failed": "MLX5_EVENT_TYPE_PATH_MIG_FAILED",
         "event_internal_error": "MLX5_EVENT_TYPE_INTERNAL_ERROR", "event_port_change": "MLX5_EVENT_TYPE_PORT_CHANGE",
         "event_wq_inval_req_error": "MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR",
         "event_wq_access_error": "MLX5_EVENT_TYPE_WQ_ACCESS_ERROR"}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


class Layout:
    """The kernel's mlx5_ifc structures: member lists, sizes and offsets, in bits."""

    MEMBER = re.compile(r"^(?:u8\s+(\w+)((?:\[[^\]]*\])+)|(struct|union)\s+mlx5_ifc_(\w+?)(?:_bits)?\s+(\w+)((?:\[[^\]]*\])*))$")

    def __init__(self, text):
        text = strip_comments(text)
        self.kinds, self.bodies, self._members, self._sizes = {}, {}, {}, {}
        for m in re.finditer(r"\b(struct|union)\s+mlx5_ifc_(\w+?)(?:_bits)?\s*\{", text):
            depth, i = 1, m.end()
            while depth:
                depth += (text[i] == "{") - (text[i] == "}")
                i += 1
            self.kinds[m.group(2)], self.bodies[m.group(2)] = m.group(1), text[m.end():i - 1]

    def members(self, name):
        """(member, type or None for bits, dimensions) of `name`, parsed when first asked for."""
        if name not in self._members:
            if name not in self.bodies:
                raise KeyError(f"the kernel header has no mlx5_ifc_{name}_bits")
            body = []
            for decl in filter(None, (d.strip() for d in self.bodies[name].split(";"))):
                mm = self.MEMBER.match(" ".join(decl.split()))
                if not mm:
                    raise ValueError(f"mlx5_ifc_{name}_bits: cannot parse member '{decl}'")
                if mm.group(1):
                    body.append((mm.group(1), None, [d.strip() for d in re.findall(r"\[([^\]]*)\]", mm.group(2))]))
                else:
                    dims = [d.strip() for d in re.findall(r"\[([^\]]*)\]", mm.group(6) or "")]
                    body.append((mm.group(5), mm.group(4), ["0x1"] + dims))
            self._members[name] = body
        return self._members[name]

    def _member_bits(self, typ, dims):
        if any(d == "" for d in dims):
            return 0  # flexible array member
        n = 1
        for d in dims:
            n *= int(d, 0)
        return n * (self.size(typ) if typ else 1)

    def size(self, name):
        if name not in self._sizes:
            bits = [self._member_bits(t, dims) for _, t, dims in self.members(name)]
            self._sizes[name] = max(bits, default=0) if self.kinds[name] == "union" else sum(bits)
        return self._sizes[name]

    def fields(self, name):
        """(member, type, bit offset, bit size) of each member of structure `name`."""
        out, at = [], 0
        for member, typ, dims in self.members(name):
            bits = self._member_bits(typ, dims)
            out.append((member, typ, 0 if self.kinds[name] == "union" else at, bits))
            if self.kinds[name] != "union":
                at += bits
        return out

    def resolve(self, struct, path):
        """(bit offset, bit size) of the member at dotted `path` in `struct`. A last component
        `a+b` names adjacent members taken as one field (rmac_47_32+rmac_31_0)."""
        head, _, last = path.rpartition(".")
        if "+" in last:
            parts = [self.resolve(struct, f"{head}.{p}" if head else p) for p in last.split("+")]
            for (at, bits), (nxt, _) in zip(parts, parts[1:]):
                if at + bits != nxt:
                    raise KeyError(f"'{last}' in mlx5_ifc_{struct}_bits are not adjacent")
            return parts[0][0], sum(bits for _, bits in parts)
        offset, name = 0, struct
        parts = path.split(".")
        for k, part in enumerate(parts):
            hit = [f for f in self.fields(name) if f[0] == part]
            if not hit:
                raise KeyError(f"mlx5_ifc_{name}_bits has no member '{part}'")
            _, typ, at, bits = hit[0]
            offset += at
            if k < len(parts) - 1:
                if typ is None:
                    raise KeyError(f"'{part}' in mlx5_ifc_{name}_bits is not a structure")
                name = typ
        return offset, bits

    def reserved_around(self, struct, bit, width, prefix=""):
        """The reserved member of `struct` (searched through nested structures) holding all of
        [bit, bit + width), or None."""
        for member, typ, at, bits in self.fields(struct):
            if not (at <= bit and bit + width <= at + bits):
                continue
            if typ is None:
                return prefix + member if member.startswith("reserved") else None
            return self.reserved_around(typ, bit - at, width, prefix + member + ".")
        return None


def parse_enums(text):
    """Enumerators with a literal value or a literal shift (`= 1 << 2`), by name."""
    out = {}
    pattern = r"\b((?:MLX5_|HCA_CAP_OPMOD_)\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)(?:\s*<<\s*(\d+))?\s*[,}\n]"
    for name, value, shift in re.findall(pattern, strip_comments(text)):
        out.setdefault(name, int(value, 0) << int(shift or 0))
    return out


def parse_prm(text):
    """prm_cmd.hpp's constants: {name: value} and fields {name: (bit, width)}."""
    text = strip_comments(text)
    env, fields = {}, {}
    for kind, name, expr in re.findall(
            r"inline\s+constexpr\s+(field|std::uint\d+_t|std::size_t)\s+(\w+)\s*(\{[^}]*\}|=[^;]*);", text):
        if kind == "field":
            bit, width = (e.strip() for e in expr.strip("{}").split(","))
            fields[name] = (eval(bit, {}, dict(env)), int(width, 0))
        else:
            env[name] = eval(expr.lstrip("=").strip(), {}, dict(env))
    return env, fields


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ifc", required=True, help="the kernel's include/linux/mlx5/mlx5_ifc.h")
    ap.add_argument("--prm", required=True, help="include/gpucomm/verbs_gpu/host/prm_cmd.hpp")
    args = ap.parse_args()
    # mlx5_ifc.h's hca_cap_union (QUERY_HCA_CAP's output) names structures of its siblings
    # (mlx5_ifc_fpga.h's fpga_cap), so those are read too, as scripts/gen_mlx5_ifc_layout.py does.
    siblings = sorted(glob.glob(os.path.join(os.path.dirname(args.ifc), "mlx5_ifc_*.h")))
    ifc_text = "".join(open(p).read() for p in [args.ifc] + siblings)
    layout, enums = Layout(ifc_text), {}
    # The enumerations live beside mlx5_ifc.h too (qp.h, driver.h).
    for header in sorted(glob.glob(os.path.join(os.path.dirname(args.ifc), "*.h"))):
        for k, v in parse_enums(open(header).read()).items():
            enums.setdefault(k, v)
    consts, fields = parse_prm(open(args.prm).read())

    errors, checked, reserved_only = [], 0, []
    named = set(fields) | set(BIT_STARTS)
    for name in sorted(named - set(MAPPING)):
        errors.append(f"{name}: no entry in MAPPING (every prm_cmd.hpp field is checked)")
    for name in sorted(set(MAPPING) - named):
        errors.append(f"{name}: in MAPPING but not in prm_cmd.hpp")
    for name, (struct, path) in sorted(MAPPING.items()):
        if name not in named:
            continue
        bit, width = fields[name] if name in fields else (consts[name], BIT_STARTS[name])
        checked += 1
        if path is None:
            where = layout.reserved_around(struct, bit, width)
            if where is None:
                errors.append(f"{name}: bits {bit:#x}+{width} of {struct} are said to be DEVX-only, but they are not "
                              f"inside one reserved member of mlx5_ifc_{struct}_bits")
            else:
                reserved_only.append(f"{name} ({struct} bits {bit:#x}+{width}, kernel: {where})")
            continue
        try:
            want_bit, want_width = layout.resolve(struct, path)
        except KeyError as e:
            errors.append(f"{name}: {e}")
            continue
        if (bit, width) != (want_bit, want_width):
            errors.append(f"{name}: prm_cmd.hpp has bit {bit:#x} width {width}; mlx5_ifc_{struct}_bits.{path} "
                          f"is at bit {want_bit:#x} width {want_width}")
    for base, (struct, path) in BASES.items():
        checked += 1
        want = layout.resolve(struct, path)[0]
        if consts.get(base) != want:
            errors.append(f"{base}: prm_cmd.hpp has {consts.get(base)!r}; {struct}.{path} starts at bit {want:#x}")
    for name, struct in SIZES.items():
        checked += 1
        if consts.get(name) != layout.size(struct) // 8:
            errors.append(f"{name}: prm_cmd.hpp has {consts.get(name)}; mlx5_ifc_{struct}_bits is "
                          f"{layout.size(struct) // 8} bytes")
    for a, b, path in SAME_OFFSETS:
        checked += 1
        if layout.resolve(a, path) != layout.resolve(b, path):
            errors.append(f"{path}: at different places in {a} and {b}; prm_cmd.hpp uses one offset for both")
    for table in (OPCODES, ENUMS):
        for name, enum in table.items():
            checked += 1
            if enum not in enums:
                errors.append(f"{name}: the kernel header has no {enum}")
            elif consts.get(name) != enums[enum]:
                errors.append(f"{name}: prm_cmd.hpp has {consts.get(name)}; the kernel's {enum} is {enums[enum]:#x}")

    for line in reserved_only:
        print(f"DEVX-only, inside a reserved kernel member: {line}")
    for line in errors:
        print(f"MISMATCH {line}")
    print(f"{checked} checks of prm_cmd.hpp against {args.ifc}: {checked - len(errors)} passed, {len(errors)} failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
