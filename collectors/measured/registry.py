"""Registered collectors for measured GPU profiles (component measurements)."""

from __future__ import annotations

from collectors.measured.llmservingsim_profile import LLMServingSimProfileCollector
from collectors.measured.splitwise_profile import SplitwiseProfileCollector
from collectors.measured.vidur_profile import VidurProfileCollector

PROFILE_COLLECTORS = [LLMServingSimProfileCollector(), VidurProfileCollector(), SplitwiseProfileCollector()]
