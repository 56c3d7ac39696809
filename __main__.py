"""`pulumi up` entry point (needs the Python language host): the spec named by the stack's
``railyard:spec`` config, compiled and declared. Everything else is in railyard.deploy."""

from pathlib import Path

import pulumi

from railyard.deploy.program import ROOT, program
from railyard.load import load_plan

spec = Path(pulumi.Config("railyard").require("spec"))
program(load_plan(spec if spec.is_absolute() else ROOT / spec))
