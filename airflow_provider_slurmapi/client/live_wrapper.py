"""The batch script that publishes a job's output while it runs (see ``client/live_output``): it
starts a publisher that copies the new bytes of the job's stdout and stderr into closed pieces under
the live folder, then becomes the user's script (``exec``).

The user's script is then the batch process Slurm started: the same PID, signal dispositions,
stdin, stdout and stderr, environment, arguments, and exit code or death by signal. What differs:
it runs from a private copy open as file descriptor 9, so its ``$0`` is ``/dev/fd/9``; and the
publisher is a process of the job, though no child of the script. A copy that cannot be made or
checked runs none of the script: the job ends with ``LIVE_SCRIPT_UNCOPIED`` and one line on its
stderr.

Only the script is made here (no I/O), and the task's headline when the job refused to run.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from airflow_provider_slurmapi.client.jobs import JobStatus
from airflow_provider_slurmapi.client.live_output import folder_tag
from airflow_provider_slurmapi.client.staging import interpreter_and_directives, wrapper_refusal

LIVE_SCRIPT_UNCOPIED = 96  # the wrapper's exit code when it could not make its private copy of the script
_UNCOPIED_LINE = re.compile(
    r"slurm-job-api: cannot make a private copy of the batch script in (.+?): (.+?); the job runs none of it"
)


def live_script(script: str, *, try_folder: str, live_folder: str, period: int, array: bool) -> str:
    """A bash script that becomes ``script`` (``exec``, with the same arguments) once it has started
    a publisher of the job's stdout and stderr: every ``period`` seconds, and once more when the
    batch process has ended, their new bytes go to a closed piece under ``live_folder``.

    The publisher reads the files the batch process has as stdout and stderr (``{try_folder}/{job}.out``
    and ``.err``, as the submit operator names them) through descriptors it opened at the start,
    never by their path again, from their size at the start on (a requeued run appending to them
    publishes only its own bytes). A piece that cannot be written is skipped, never failing the
    job; the first failure is said once, in one line on the job's stderr (the only line the
    publisher ever adds there)."""
    interpreter, header = interpreter_and_directives(script)
    text = script if script.endswith("\n") else script + "\n"  # what the copy holds
    digest = hashlib.sha256(text.encode()).hexdigest()
    # the same script wraps the same (a staged wrapper is staged once); no script holds its own hash
    delimiter = f"__SLURM_JOB_SCRIPT_{digest[:16]}__"
    stem = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' if array else '"$SLURM_JOB_ID"'
    return "\n".join(
        [
            "#!/bin/bash",
            *header,
            "# Live output: this script becomes the batch script below (exec), run from a private copy;",
            f"# a publisher beside it puts the job's stdout and stderr in closed pieces under {live_folder}.",
            f"__live_job={stem}",
            f"__live_folder={shlex.quote(live_folder)}",
            f"__live_tag={folder_tag(try_folder)}",
            f"__live_period={int(period)}",
            _COPY.replace("{uncopied}", str(LIVE_SCRIPT_UNCOPIED)),
            "__live_text() {",
            f"cat <<'{delimiter}'",
            text + delimiter,
            "}",
            _CHECK.replace("{digest}", digest),
            _PUBLISHER,
            _RESTORED_ENVIRONMENT,
            f'exec env -i -- "${{__live_env[@]}}" {interpreter} /dev/fd/9 "$@"',
            "",
        ]
    )


# The private copy: made, opened as fd 9, unlinked, then checked; a failure runs none of the script.
_COPY = r"""__live_dir=${TMPDIR:-/tmp}
__live_refuse() {  # ERROR: the job runs none of the script; its last words name the cause
    local cause=${1##*$'\n'}
    printf 'slurm-job-api: cannot make a private copy of the batch script in %s: %s; the job runs none of it\n' \
        "$__live_dir" "${cause##*: }" >&2
    exit {uncopied}
}"""

_CHECK = r"""__live_copy=$(umask 077 && mktemp "$__live_dir/slurm-job-script.XXXXXX" 2>&1) || __live_refuse "$__live_copy"
__live_error=$({ __live_text >"$__live_copy"; } 2>&1)
{ exec 9<"$__live_copy"; } 2>/dev/null
rm -f -- "$__live_copy"
if [ "$(sha256sum <&9 2>/dev/null)" != "{digest}  -" ]; then
    __live_refuse "${__live_error:-the copy differs from the script}"
fi"""

# The publisher: bash, no tools beyond coreutils, detached from the batch process (which never
# waits for it) and deaf to the signals Slurm sends the job's processes. It reads the job's files
# through descriptors of its own, so a link planted at their paths later is never followed.
_PUBLISHER = r"""__live_run=${SLURM_RESTART_COUNT:-0} __live_batch=$$ __live_failed=
__live_open() {  # STREAM FD: the job's file open as FD (a regular file), opened again, read from its size now
    local fd
    [ -f "/proc/self/fd/$2" ] && { exec {fd}<"/proc/self/fd/$2"; } 2>/dev/null || return 1
    printf -v "__live_fd_$1" %s "$fd"
    printf -v "__live_seq_$1" %s 0
    printf -v "__live_pos_$1" %s "$(stat -L -c %s "/proc/self/fd/$fd" 2>/dev/null || echo 0)"
    printf -v "__live_id_$1" %s "$(stat -L -c %d:%i "/proc/self/fd/$fd" 2>/dev/null)"
    __live_streams+=" $1"
}
__live_piece() {  # STREAM: the bytes of its file past the stream's position, as one closed piece
    local stream=$1 fd_var=__live_fd_$1 pos_var=__live_pos_$1 seq_var=__live_seq_$1 file size name tmp
    file=/proc/self/fd/${!fd_var}  # in each command, its own copy of the descriptor
    size=$(stat -L -c %s "$file" 2>/dev/null) || return 0
    [ "$size" -gt "${!pos_var}" ] || return 0
    printf -v name '%010d-%s-%s-%s-%s-%06d' "$(date +%s)" "$__live_job" "$__live_tag" "$__live_run" "$stream" "${!seq_var}"
    if [ "${!seq_var}" -eq 0 ] && [ "${!pos_var}" -gt 0 ]; then name+="+${!pos_var}"; fi  # where the run began
    tmp="$__live_folder/.$name.tmp"
    if tail -c +"$((${!pos_var} + 1))" "$file" 2>/dev/null | head -c "$((size - ${!pos_var}))" >"$tmp" 2>/dev/null \
        && mv -f -- "$tmp" "$__live_folder/$name" 2>/dev/null; then
        printf -v "$pos_var" %s "$size"
        printf -v "$seq_var" %s "$((${!seq_var} + 1))"
    else
        rm -f -- "$tmp" 2>/dev/null
        if [ -z "$__live_failed" ]; then  # said once, on the job's stderr: the job goes on
            __live_failed=1
            printf 'slurm-job-api: could not publish live output under %s; the job goes on, and its output is read when it ends\n' \
                "$__live_folder" >&5 2>/dev/null
        fi
    fi
}
__live_publish() {
    local stream
    for stream in $__live_streams; do __live_piece "$stream"; done
}
__live_watch() {  # every period while the batch process lives, then the last piece
    while kill -0 "$__live_batch" 2>/dev/null; do
        for ((__live_tick = 0; __live_tick < __live_period; __live_tick++)); do
            kill -0 "$__live_batch" 2>/dev/null || break
            sleep 1
        done
        __live_publish
    done
    __live_publish
}
(  # a subshell that starts the publisher and ends at once: the publisher is no one's child
    exec 9<&- 5>&2  # not the script's copy; the job's stderr, for the publisher's one note
    trap '' HUP INT QUIT TERM USR1 USR2 ALRM VTALRM PROF XCPU XFSZ TSTP TTIN TTOU
    __live_streams= __live_id_out= __live_id_err=
    __live_open out 1
    __live_open err 5
    # one file for both (same device and inode): published once, as out
    if [ -n "$__live_id_out" ] && [ "$__live_id_out" = "$__live_id_err" ]; then __live_streams=" out"; fi
    mkdir -p -- "$__live_folder" 2>/dev/null
    __live_watch </dev/null >/dev/null 2>&1 &
)"""


# The environment the batch process was started with, as it was (bash exports PWD and SHLVL).
_RESTORED_ENVIRONMENT = r"""__live_env=()
while IFS= read -r -d '' __live_variable; do __live_env+=("$__live_variable"); done </proc/$$/environ"""


def uncopied_script_headline(status: JobStatus, error_output: str) -> str:
    """The start of a failed task's message when the live-output wrapper could not make its private
    copy of the batch script; else ""."""
    found = wrapper_refusal(status, error_output, _UNCOPIED_LINE, LIVE_SCRIPT_UNCOPIED)
    if found is None:
        return ""
    return (
        f"The job could not make a private copy of its batch script in {found.group(1)} ({found.group(2)}), "
        f"so it ran none of it (exit code {LIVE_SCRIPT_UNCOPIED}); the node's TMPDIR (or /tmp) must have room "
        "and be writable. "
    )
