# shellcheck shell=bash
# Sourced by recipes/common.sh, recipes/cpu_train.sh and recipes/cpu_demo.sh: how they start the trainer and the
# services beside it. Stopping the script stops the run (vb_run_trainer), and a resumed run keeps its metrics file
# (vb_fresh_metrics).
#
# A non-interactive bash dies of an untrapped SIGTERM at once and leaves its foreground command (verl's driver, and
# through it the Ray cluster it started) running; with a trap it runs the trap only after that command ends. So the
# trainer runs in the background here and a SIGTERM, SIGINT or SIGHUP of the script becomes a SIGTERM of the trainer,
# whose driver (verl_bot/hooks/driver.py) turns it into Ctrl-C's KeyboardInterrupt: Ray shuts down and takes its
# actors with it. (A background command of a non-interactive shell ignores SIGINT, so the terminal's Ctrl-C reaches
# the trainer only as this SIGTERM.) While no trainer runs, a stop ends the script with 128 + the signal's number,
# through its EXIT trap (recipes/lib/services.sh's stops the services it started).
#
# No window: the traps are armed before a process is started, and bash runs a trap only between two commands, so a
# stop can land after `cmd &` and before its PID is recorded. From vb_hold_stops to vb_release_stops a stop is held
# (the first one's code in VB_HELD) and then replayed, once the PID is known.

VB_TRAINER_PID=
VB_HOLD=0
VB_HELD=

# vb_on_stop CODE: the trap of SIGHUP (129), SIGINT (130) and SIGTERM (143)
vb_on_stop() {
    if ((VB_HOLD)); then
        VB_HELD=${VB_HELD:-$1}
    elif [[ -n "${VB_TRAINER_PID}" ]]; then
        kill -TERM "${VB_TRAINER_PID}" 2>/dev/null || true
    else
        exit "$1"
    fi
}

# vb_hold_stops: arm the traps, holding a stop until vb_release_stops (call it before starting a process)
vb_hold_stops() {
    VB_HELD=
    VB_HOLD=1
    trap 'vb_on_stop 129' HUP
    trap 'vb_on_stop 130' INT
    trap 'vb_on_stop 143' TERM
}

# vb_release_stops: the process's PID is recorded: a stop held since vb_hold_stops takes effect now
vb_release_stops() {
    VB_HOLD=0
    [[ -z "${VB_HELD}" ]] || vb_on_stop "${VB_HELD}"
}

# vb_run_trainer CMD [ARGS...]: run CMD, forwarding a stop of this script to it; returns CMD's exit code. A stop
# before CMD is started ends the script without starting it.
vb_run_trainer() {
    local rc=0
    vb_hold_stops
    [[ -z "${VB_HELD}" ]] || vb_release_stops
    "$@" &
    VB_TRAINER_PID=$!
    vb_release_stops
    while true; do
        rc=0
        wait "${VB_TRAINER_PID}" || rc=$?
        # wait also returns when a trapped signal arrives: wait again while the trainer is still stopping
        kill -0 "${VB_TRAINER_PID}" 2>/dev/null || break
    done
    VB_TRAINER_PID=
    return "${rc}"
}

# vb_fresh_metrics CKPT_DIR: a fresh run starts a fresh $VERL_FILE_LOGGER_PATH; a run that resumes from CKPT_DIR
# (verl's trainer.resume_mode=auto, the default) keeps the metrics of the steps before it (verl_bot/hooks/resume.py)
vb_fresh_metrics() {
    if [[ ! -f "$1/latest_checkpointed_iteration.txt" ]]; then
        rm -f "${VERL_FILE_LOGGER_PATH}"
    fi
}
