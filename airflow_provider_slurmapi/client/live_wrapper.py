"""The batch script that publishes a job's output while it runs (see ``client/live_output``): the
user's script runs as written, and a publisher beside it copies the new bytes of the job's stdout
and stderr into closed pieces under the live folder.

Only the script is made here (no I/O).
"""

from __future__ import annotations

import hashlib
import shlex

from airflow_provider_slurmapi.client.live_output import folder_tag


def live_script(script: str, *, try_folder: str, live_folder: str, period: int, array: bool) -> str:
    """A bash script that runs ``script`` as its child with the same arguments, environment and
    output, publishes the new bytes of the job's stdout and stderr (``{try_folder}/{job}.out`` and
    ``.err``, as the submit operator names them) under ``live_folder`` every ``period`` seconds and
    when the child ends, and ends as the child did: its exit code, or the signal that killed it.

    Signals Slurm sends the batch shell alone (``--signal=B:...``) are passed on to the child;
    those it sends every process of the job (cancel, time limit, preemption) reach the child
    directly. A piece that cannot be written is skipped, never failing the job; the first failure
    is said once, in one line on the job's stderr (the only line the publisher ever adds there)."""
    from airflow_provider_slurmapi.client.staging import interpreter_and_directives

    interpreter, header = interpreter_and_directives(script)
    # the same script wraps the same (a staged wrapper is staged once); no script holds its own hash
    delimiter = f"__SLURM_JOB_SCRIPT_{hashlib.sha256(script.encode()).hexdigest()[:16]}__"
    stem = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' if array else '"$SLURM_JOB_ID"'
    return "\n".join(
        [
            "#!/bin/bash",
            *header,
            "# Live output: the batch script below runs as this script's child; its stdout and stderr",
            f"# are published in closed pieces under {live_folder} while it runs.",
            f"__live_job={stem}",
            f"__live_folder={shlex.quote(live_folder)}",
            f"__live_out={shlex.quote(try_folder)}/$__live_job.out",
            f"__live_err={shlex.quote(try_folder)}/$__live_job.err",
            f"__live_tag={folder_tag(try_folder)}",
            f"__live_period={int(period)}",
            _PUBLISHER,
            '__live_script=$(umask 077 && mktemp "${TMPDIR:-/tmp}/slurm-job-script.XXXXXX") || exit 1',
            f"cat >\"$__live_script\" <<'{delimiter}'",
            script if script.endswith("\n") else script + "\n",
            delimiter,
            _RUN_CHILD.replace("{interpreter}", interpreter).replace("{publisher}", _START_PUBLISHER),
            "",
        ]
    )


# The publisher: bash, no tools beyond coreutils. Its own output goes nowhere near the job's.
_PUBLISHER = r"""__live_run=${SLURM_RESTART_COUNT:-0}
__live_seq_out=0 __live_seq_err=0 __live_pos_out=0 __live_pos_err=0 __live_failed=
__live_piece() {  # STREAM FILE: the bytes of FILE past the stream's position, as one closed piece
    local stream=$1 file=$2 pos_var=__live_pos_$1 seq_var=__live_seq_$1 size name tmp
    size=$(stat -c %s -- "$file" 2>/dev/null) || return 0
    [ "$size" -gt "${!pos_var}" ] || return 0
    printf -v name '%010d-%s-%s-%s-%s-%06d' "$(date +%s)" "$__live_job" "$__live_tag" "$__live_run" "$stream" "${!seq_var}"
    tmp="$__live_folder/.$name.tmp"
    if tail -c +"$((${!pos_var} + 1))" -- "$file" 2>/dev/null | head -c "$((size - ${!pos_var}))" >"$tmp" 2>/dev/null \
        && mv -f -- "$tmp" "$__live_folder/$name" 2>/dev/null; then
        printf -v "$pos_var" %s "$size"
        printf -v "$seq_var" %s "$((${!seq_var} + 1))"
    else
        rm -f -- "$tmp" 2>/dev/null
        if [ -z "$__live_failed" ]; then  # said once, on the job's stderr: the job goes on
            __live_failed=1
            printf 'slurm-job-api: could not publish live output under %s; the job goes on, and its output is read when it ends\n' \
                "$__live_folder" >&8 2>/dev/null
        fi
    fi
}
__live_publish() {
    __live_piece out "$__live_out"
    [ "$__live_err" = "$__live_out" ] || __live_piece err "$__live_err"
}
mkdir -p -- "$__live_folder" 2>/dev/null
exec 8>&2  # the job's stderr, for the publisher's one note"""

# Started once the child runs: it publishes every period while the child lives, then the last piece.
# Cancel and time limit signal every process of the job: the publisher ignores them and waits.
_START_PUBLISHER = r"""(
    trap '' TERM INT HUP USR1 USR2 ALRM
    while kill -0 "$__live_child" 2>/dev/null; do
        for ((__live_tick = 0; __live_tick < __live_period; __live_tick++)); do
            kill -0 "$__live_child" 2>/dev/null || break
            sleep 1
        done
        __live_publish
    done
    __live_publish  # the last piece: the child has ended
) </dev/null >/dev/null 2>&1 &
__live_publisher=$!"""

_RUN_CHILD = r"""# what Slurm sends the batch shell alone (--signal=B:..., scancel --batch) is the child's;
# TERM is not passed on: cancel, time limit and preemption send it to every process already
for __live_signal in USR1 USR2 HUP INT QUIT ALRM; do
    trap "kill -s $__live_signal \$__live_child 2>/dev/null" "$__live_signal"
done
trap : TERM
{interpreter} "$__live_script" "$@" 8>&- &
__live_child=$!
{publisher}
while :; do
    wait "$__live_child"
    __live_status=$?
    kill -0 "$__live_child" 2>/dev/null && continue  # a trapped signal ended the wait, not the child
    wait "$__live_child" 2>/dev/null  # the child's own status, if a signal ended the wait as it ended
    __live_again=$?
    # 127 (or -1): already waited for, and the first wait's status was the child's
    if [ "$__live_again" -ge 0 ] && [ "$__live_again" -ne 127 ]; then __live_status=$__live_again; fi
    break
done
rm -f -- "$__live_script"
exec 8>&-
wait "$__live_publisher" 2>/dev/null
if [ "$__live_status" -gt 128 ] && [ "$__live_status" -lt 160 ]; then
    __live_name=$(kill -l "$__live_status" 2>/dev/null) && trap - "$__live_name" && kill -s "$__live_name" $$
fi
exit "$__live_status"
"""
