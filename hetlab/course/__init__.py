"""The course itself: the exercises' graders (``grading``, every notebook) and the textbook
loader that notebook 01 races against the library's (``textbook``).
"""
