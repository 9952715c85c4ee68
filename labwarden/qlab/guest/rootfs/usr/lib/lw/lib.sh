# Shared by the qlab's DUT scripts (POSIX sh, busybox userland).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

# uci_load FILE PREFIX: read a UCI file into variables (see uci.awk)
uci_load() {
  [ -f "$1" ] || return 1
  eval "$(busybox awk -v p="$2" -f /usr/lib/lw/uci.awk "$1")"
}

# uci_val PREFIX SECTION OPTION [DEFAULT]
uci_val() {
  eval "_v=\${$1_$2_$3-}"
  [ -n "$_v" ] && echo "$_v" || echo "${4:-}"
}

# uci_type PREFIX SECTION
uci_type() { eval "echo \${$1_T_$2-}"; }

# uci_of_type PREFIX TYPE: section names of that type, in file order
uci_of_type() {
  eval "_secs=\${$1_S-}"
  for _s in $_secs; do [ "$(uci_type "$1" "$_s")" = "$2" ] && printf '%s ' "$_s"; done
  echo
}

# channel -> MHz (2.4 GHz below 15, else 5 GHz)
chan_freq() {
  if [ "$1" -eq 14 ]; then echo 2484
  elif [ "$1" -lt 15 ]; then echo $((2407 + 5 * $1))
  else echo $((5000 + 5 * $1))
  fi
}

# a disk by its QEMU serial (lwflash, lwdata)
by_serial() {
  for _d in /sys/block/vd*; do
    [ "$(cat "$_d/serial" 2>/dev/null)" = "$1" ] && echo "/dev/${_d##*/}" && return 0
  done
  return 1
}

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
