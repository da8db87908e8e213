"""The course itself: the graded exercises (``exercises`` says what each asks and which mistakes it
names; ``grading`` runs a learner's function against it, every notebook).
"""
