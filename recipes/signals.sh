# shellcheck shell=bash
# Sourced by recipes/common.sh and recipes/cpu_train.sh: how both launch the trainer. Stopping the script stops the
# run (vb_run_trainer), and a resumed run keeps its metrics file (vb_fresh_metrics).
#
# A non-interactive bash dies of an untrapped SIGTERM at once and leaves its foreground command (verl's driver, and
# through it the Ray cluster it started) running; with a trap it runs the trap only after that command ends. So the
# trainer runs in the background here and a SIGTERM, SIGINT or SIGHUP of the script becomes a SIGTERM of the trainer,
# whose driver (verl_bot/hooks/driver.py) turns it into Ctrl-C's KeyboardInterrupt: Ray shuts down and takes its
# actors with it. (A background command of a non-interactive shell ignores SIGINT, so the terminal's Ctrl-C reaches
# the trainer only as this SIGTERM.)

# vb_run_trainer CMD [ARGS...]: run CMD, forwarding a stop of this script to it; returns CMD's exit code
vb_run_trainer() {
    "$@" &
    VB_TRAINER_PID=$!
    trap 'kill -TERM "${VB_TRAINER_PID}" 2>/dev/null || true' TERM INT HUP
    local rc=0
    while true; do
        rc=0
        wait "${VB_TRAINER_PID}" || rc=$?
        # wait also returns when a trapped signal arrives: wait again while the trainer is still stopping
        kill -0 "${VB_TRAINER_PID}" 2>/dev/null || break
    done
    trap - TERM INT HUP
    return "${rc}"
}

# vb_fresh_metrics CKPT_DIR: a fresh run starts a fresh $VERL_FILE_LOGGER_PATH; a run that resumes from CKPT_DIR
# (verl's trainer.resume_mode=auto, the default) keeps the metrics of the steps before it (verl_bot/hooks/resume.py)
vb_fresh_metrics() {
    if [[ ! -f "$1/latest_checkpointed_iteration.txt" ]]; then
        rm -f "${VERL_FILE_LOGGER_PATH}"
    fi
}
