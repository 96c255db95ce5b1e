# SPDX-License-Identifier: Apache-2.0
# Sourced by the install smoke tests: fail/ok, and serve_smoke, which writes a CTR dataset of
# RECORDS records with SLUICECTL, a config dir with pipeline "smoke" over it (batches of 100, one
# epoch), and starts SLUICED on $work/s.sock, returning once it answers. Sets $sock and
# $daemon; the caller owns $work (a directory) and kills $daemon at exit.

fail() { echo "FAIL $*"; exit 1; }
ok() { echo "ok   $*"; }

serve_smoke() { # SLUICED SLUICECTL RECORDS
	"$2" gen ctr "$work/data" --files 2 --records "$3" --seed 3 >/dev/null
	mkdir "$work/conf"
	cat >"$work/conf/smoke.json" <<JSON
{"name": "smoke", "type": "independent", "args": {
 "dataset": {"type": "dir", "args": {"data_dir": "$work/data"}},
 "target_batch_size": 100, "drop_remainder": false, "epochs": 1,
 "num_read_buffer_bytes": 65536, "num_prefetch": 2,
 "primary_features": [{"from_name": "label", "to_name": "label"}]}}
JSON
	sock="$work/s.sock"
	"$1" --socket "$sock" --config-dir "$work/conf" --workers 2 2>"$work/sluiced.log" &
	daemon=$!
	for _ in $(seq 300); do # until it answers (a condition, polled)
		"$2" --socket "$sock" list >/dev/null 2>&1 && return 0
		kill -0 "$daemon" 2>/dev/null || fail "sluiced exited: $(cat "$work/sluiced.log")"
		sleep 0.1
	done
	fail "sluiced did not answer on $sock within 30 s"
}
