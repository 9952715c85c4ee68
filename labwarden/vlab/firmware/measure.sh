#!/bin/sh
# Dev-machine measurement of stad CPU% (not used by labwarden; its own tools do this on a DUT).
#   sh measure.sh BUILD_DIR CONFIG_DIR N [REPS] [WINDOW_S] [stop]
# Starts stad + stasim -n N + stamon, settles 3 s, then prints stad CPU% = (utime+stime delta)
# / CLK_TCK / wall * 100 for REPS consecutive windows. With `stop`, stamon is SIGSTOPped for
# the windows. Kills everything it started.
set -eu
B=$1 C=$2 N=$3 REPS=${4:-3} WIN=${5:-10} MODE=${6:-}
T=$(mktemp -d) S=$T/stad.sock HZ=$(getconf CLK_TCK)
export LD_LIBRARY_PATH=$B
"$B/stad" --config "$C" --socket "$S" 2>"$T/stad.log" & STAD=$!
while [ ! -S "$S" ]; do sleep 0.05; done
"$B/stasim" --socket "$S" -n "$N" >"$T/sim.out" & SIM=$!
while ! grep -q associated "$T/sim.out" 2>/dev/null; do sleep 0.05; done
"$B/stamon" --config "$C" --socket "$S" & MON=$!
sleep 3
[ "$MODE" = stop ] && kill -STOP $MON
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' /proc/$STAD/stat; }  # utime+stime after ')'
now() { awk '{ print $1 }' /proc/uptime; }
i=0
while [ $i -lt "$REPS" ]; do
	t0=$(ticks) w0=$(now); sleep "$WIN"; t1=$(ticks) w1=$(now)
	awk -v a="$t0" -v b="$t1" -v x="$w0" -v y="$w1" -v hz="$HZ" 'BEGIN { printf "%.2f\n", (b - a) / hz / (y - x) * 100 }'
	i=$((i + 1))
done
[ "$MODE" = stop ] && kill -CONT $MON
kill $MON; wait $MON 2>/dev/null || true
kill $SIM; wait $SIM 2>/dev/null || true
kill $STAD; wait $STAD 2>/dev/null || true
rm -rf "$T"
