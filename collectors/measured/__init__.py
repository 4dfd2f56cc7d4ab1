"""Collectors for measured data: GPU profiles and measured serving / agent runs, into the measured schema."""
