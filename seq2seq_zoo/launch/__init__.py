"""An experiment's runs as cluster jobs, through submitit (Slurm, or its local executor).

    jobs.py    what runs inside a job: ``zoo run EXP --only RUN --resume`` in a child process, stopped with
               its checkpoint and requeued on pre-emption; its state file for ``zoo status`` (no torch here)
    submit.py  the executor's parameters from the [launcher] settings, the bookkeeping under
               ``RESULTS/EXPERIMENT/.jobs/``, the queue (squeue, no accounting database needed), each run's
               state

The command side (which runs need a job, the options, ``zoo status``) is ``cli/launch.py``; docs/cluster.md
says how to use it.
"""
